package inspector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// funcs are the templates' helpers. Every value they return is text (escaped by html/template)
// or a URL path built from url.PathEscape.
var funcs = template.FuncMap{
	"sessURL": sessURL,
	"bytes":   byteSize,
	// One time format on every page: stamp (2006-01-02 15:04:05 UTC) for a date, clock
	// (15:04:05.000) for a timeline row, exact (with ms) and ago in titles, iso for datetime.
	"stamp": func(ms int64) string { return utc(ms).Format("2006-01-02 15:04:05 UTC") },
	"clock": func(ms int64) string { return utc(ms).Format("15:04:05.000") },
	"exact": func(ms int64) string { return utc(ms).Format("2006-01-02 15:04:05.000 UTC") },
	"iso":   func(ms int64) string { return utc(ms).Format("2006-01-02T15:04:05.000Z") },
	"ago":   ago,
	"dur":   duration,
	"tookText": func(what string) string {
		switch what {
		case "turn":
			return "from turn/start to turn/end"
		case "step":
			return "from step/start to step/end"
		case "call":
			return "from the tool/call to its tool/result"
		case "stream":
			return "from the first streamed chunk to the assistant/message"
		}
		return what
	},
	"tabs":     func() []string { return tabs },
	"tabLabel": func(tab string) string { return tabLabels[tab] },
	"sub64":    func(a, b int64) int64 { return a - b },
	"parentAt": parentAt,
	"deref": func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	},
	"str": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"add":   func(a, b int) int { return a + b },
	"add64": func(a, b int64) int64 { return a + b },
	"seqRange": func(r *Row) string {
		if r.Seq == r.Last {
			return fmt.Sprint(r.Seq)
		}
		return fmt.Sprintf("%d–%d", r.Seq, r.Last)
	},
	"json": func(raw json.RawMessage) string { return string(raw) },
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
}

// tabs are the session page's sections, in order; the first is shown when the URL names none.
var tabs = []string{"conversation", "timeline", "forks", "projections", "raw"}

var tabLabels = map[string]string{"conversation": "Conversation", "timeline": "Timeline", "forks": "Fork tree",
	"projections": "Projections", "raw": "Raw log"}

func utc(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// ago is how long before now Unix ms ms was: 12s ago, 5m ago, 3.2h ago, 4d ago ("" for 0).
func ago(ms int64) string {
	if ms <= 0 {
		return ""
	}
	d := time.Since(time.UnixMilli(ms)).Round(time.Second)
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh ago", d.Hours())
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// duration is ms milliseconds for a human: 850 ms, 4.2 s, 3 min 12 s, 2 h 04 min.
func duration(ms int64) string {
	switch {
	case ms < 0:
		return "-"
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 10_000:
		return fmt.Sprintf("%.2f s", float64(ms)/1000)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	case ms < 3_600_000:
		return fmt.Sprintf("%d min %02d s", ms/60_000, ms%60_000/1000)
	}
	return fmt.Sprintf("%d h %02d min", ms/3_600_000, ms%3_600_000/60_000)
}

// sessURL is the path of session id's page.
func sessURL(id string) string { return "/sessions/" + url.PathEscape(id) }

// eventPath is where event seq of session id is served whole, as its JSON line.
func eventPath(id string, seq int64) string {
	return sessURL(id) + "/events/" + strconv.FormatInt(seq, 10)
}

// byteSize is n bytes for a human: 512 B, 64.0 KiB, 5.0 MiB.
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// render executes template name into a buffer first, so that a failure is a clean 500.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("inspector: render", "template", name, "err", err)
		http.Error(w, "inspector: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fragment renders template name to a string (for the live streams).
func (s *Server) fragment(name string, data any) (string, error) {
	var b bytes.Buffer
	err := s.tmpl.ExecuteTemplate(&b, name, data)
	return b.String(), err
}

func (s *Server) errorPage(w http.ResponseWriter, _ *http.Request, status int, title, text string) {
	s.render(w, status, "error.html", struct {
		Status      int
		Title, Text string
	}{status, title, text})
}

// writeJSON writes v as one JSON line without HTML escaping (as the CLI prints it).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
