package inspector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/projector"
)

// listLimit is the default page of the sessions list; maxListLimit the largest one asked for.
const (
	listLimit    = 50
	maxListLimit = 500
)

// listRow is one session of the list: its listing, title and open turn (from the title and
// turns units; empty when not folded yet).
type listRow struct {
	client.SessionInfo
	Title      string // capped (projector.MaxTitleViewBytes)
	TitleBytes int    // the whole title's length when Title is cut, else 0
	OpenTurn   *int64
	Folded     bool
	New        bool
}

type listPage struct {
	Prefix, After, Next string
	Limit               int
	Rows                []listRow
	Error               string
	// The search: order and filters, as given in the query string (Query keeps them for links).
	Sort, State, Title, Parent, Active, CreatedAfter, CreatedBefore string
	OpenTurn, Errored, Stopped                                      bool
	Query                                                           string
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lp := listPage{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: listLimit,
		Sort: q.Get("sort"), State: q.Get("state"), Title: q.Get("title"), Parent: q.Get("parent"), Active: q.Get("active"),
		CreatedAfter: q.Get("created_after"), CreatedBefore: q.Get("created_before"),
		OpenTurn: q.Get("open") == "1", Errored: q.Get("errored") == "1", Stopped: q.Get("stopped") == "1"}
	if v, err := strconv.Atoi(q.Get("limit")); err == nil && v > 0 {
		lp.Limit = min(v, maxListLimit)
	}
	if lp.Sort == "" {
		lp.Sort = client.SortCreated // newest first, as the CLI lists: a page reads only its rows
	}
	sq := client.SessionsQuery{Prefix: lp.Prefix, After: lp.After, Limit: lp.Limit, Sort: lp.Sort, State: lp.State,
		Title: lp.Title, Parent: lp.Parent, OpenTurn: lp.OpenTurn, Errored: lp.Errored, Stopped: lp.Stopped, Details: true}
	if lp.Prefix != "" && q.Get("sort") == "" {
		sq.Sort, lp.Sort = client.SortID, client.SortID // an id prefix reads best in id order
	}
	// A query value that does not parse is a bad request (400), naming the parameter.
	var perr error
	if lp.Active != "" {
		if d, err := time.ParseDuration(lp.Active); err != nil || d <= 0 {
			perr = fmt.Errorf("active=%q: want a positive duration such as 30m, 1h or 24h", lp.Active)
		} else {
			sq.ActiveSince = time.Now().Add(-d)
		}
	}
	for _, f := range []struct {
		name, v string
		dst     *time.Time
	}{{"created_after", lp.CreatedAfter, &sq.CreatedAfter}, {"created_before", lp.CreatedBefore, &sq.CreatedBefore}} {
		if f.v != "" && perr == nil {
			t, err := time.Parse("2006-01-02", f.v)
			if err != nil {
				if t, err = time.Parse(time.RFC3339, f.v); err != nil {
					perr = fmt.Errorf("%s=%q: want a date (2026-12-04) or an RFC 3339 time (2026-12-04T10:00:00Z)", f.name, f.v)
				}
			}
			*f.dst = t
		}
	}
	keep := url.Values{}
	for _, k := range []string{"prefix", "sort", "state", "title", "parent", "active", "created_after", "created_before", "open", "errored", "stopped"} {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	keep.Set("limit", strconv.Itoa(lp.Limit))
	lp.Query = keep.Encode()
	ctx, cancel := context.WithTimeout(r.Context(), 6*s.o.QueryTimeout)
	defer cancel()
	var infos []client.SessionInfo
	var next string
	err := perr
	if err == nil {
		next, err = s.c.Sessions(ctx, sq, func(si client.SessionInfo) error {
			infos = append(infos, si)
			return nil
		})
	}
	status := http.StatusOK
	if err != nil {
		lp.Error = "The sessions cannot be listed: " + err.Error()
		var ce *client.Error
		if perr != nil || (errors.As(err, &ce) && ce.Code == client.CodeBadRequest) {
			status = http.StatusBadRequest
		}
	}
	lp.Next = next
	lp.Rows = make([]listRow, len(infos))
	for i, si := range infos {
		// Title and open turn come with the listing (its batched reads of the projections, or the
		// archive's head), not from a query per row.
		lp.Rows[i] = listRow{SessionInfo: si, Title: si.Title, OpenTurn: si.OpenTurn, Folded: si.Events > 0}
		if si.TitleBytes > len(si.Title) {
			lp.Rows[i].TitleBytes = si.TitleBytes
		}
	}
	s.render(w, status, "list.html", lp)
}

// handleListLive streams the sessions that appear (Server-Sent Events "session": {id, html}),
// those whose id starts with ?prefix=.
func (s *Server) handleListLive(w http.ResponseWriter, r *http.Request) {
	sse, ok := startSSE(w)
	if !ok {
		return
	}
	prefix := r.URL.Query().Get("prefix")
	ch, cancel := s.hub.subscribe()
	defer cancel()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if sse.comment("keep-alive") != nil {
				return
			}
		case ev := <-ch:
			if !strings.HasPrefix(ev.ID, prefix) {
				continue
			}
			row := listRow{SessionInfo: client.SessionInfo{ID: ev.ID, CreatedAt: ev.CreatedAt, LastSeq: -1,
				ParentSession: ev.ParentSession, SeedLength: ev.SeedLength, Children: []string{}}, New: true}
			html, err := s.fragment("listrow", row)
			if err != nil {
				s.log.Error("inspector: render", "template", "listrow", "err", err)
				return
			}
			if sse.send("session", map[string]string{"id": ev.ID, "html": html}) != nil {
				return
			}
		}
	}
}

// capTitle is a title view's title and, when it is cut, the whole title's length: a projector
// caps the view itself; one older than the cap is capped here.
func capTitle(v projector.TitleView) (string, int) {
	if v.Title == nil {
		return "", 0
	}
	if v.TitleBytes > 0 { // cut by the projector: the cap plus its "…"
		t, _ := projector.CapText(*v.Title, projector.MaxTitleViewBytes+len("…"))
		return t, v.TitleBytes
	}
	if t, cut := projector.CapText(*v.Title, projector.MaxTitleViewBytes); cut {
		return t, len(*v.Title)
	}
	return *v.Title, 0
}
