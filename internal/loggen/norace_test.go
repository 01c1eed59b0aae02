//go:build !race

package loggen

const raceEnabled = false
