package publisher

import "github.com/agentlog/agentlog/session"

// sanitizeLocked replaces, in ev.Data, every ill-formed UTF-8 sequence and (unless
// Options.KeepLoneSurrogates) every unpaired surrogate escape by U+FFFD, and returns the number of
// strings it changed (session.SanitizeText), which countSanitizedLocked counts once ev is admitted.
// Data that needs nothing is returned as it is, after one scan.
func (w *Writer) sanitizeLocked(ev session.Event) (session.Event, int) {
	data, n := session.SanitizeText(ev.Data, w.p.opts.KeepLoneSurrogates)
	if n > 0 {
		ev.Data = data
	}
	return ev, n
}

func (w *Writer) countSanitizedLocked(n int) {
	if n > 0 {
		w.sanitized.Add(uint64(n))
		w.p.sanitized.Add(uint64(n))
	}
}

// SanitizedStrings is the number of JSON strings of this Writer's event data that Append repaired
// (see Options.KeepLoneSurrogates), in the events it admitted (a refused Append, or one retried
// after ErrBacklog, counts once).
func (w *Writer) SanitizedStrings() uint64 { return w.sanitized.Load() }

// SanitizedStrings is the number of JSON strings of event data that Append repaired, over all
// this Publisher's Writers.
func (p *Publisher) SanitizedStrings() uint64 { return p.sanitized.Load() }
