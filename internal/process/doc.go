// Package process tells whether the process that holds a lease on this host has ended, so that a
// lease left by a killed process (a projector instance's name, a writer's session) is taken over
// at once instead of after its TTL. A lease of another host, or of a process that cannot be
// told dead, is waited for.
package process
