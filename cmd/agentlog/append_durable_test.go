package main

import "testing"

// TestDurableText: DurableSeq is the seq after the last stored event, so the last durable seq of
// the file is one less, and the count is durable-first (it said one event more than was stored).
func TestDurableText(t *testing.T) {
	for _, c := range []struct {
		durable, first, n int64
		want              string
	}{
		{3, 4, 10, "none of the file's events is durable"},
		{4, 4, 10, "none of the file's events is durable"},
		{5, 4, 10, "the file's events up to seq 4 are durable (1 of 10), the rest are not written"},
		{146305, 3, 300000, "the file's events up to seq 146304 are durable (146302 of 300000), the rest are not written"},
	} {
		if got := durableText(c.durable, c.first, c.n); got != c.want {
			t.Errorf("durableText(%d, %d, %d) = %q, want %q", c.durable, c.first, c.n, got, c.want)
		}
	}
}
