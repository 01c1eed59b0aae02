package inspector

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lp := listPage{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: listLimit}
	if v, err := strconv.Atoi(q.Get("limit")); err == nil && v > 0 {
		lp.Limit = min(v, maxListLimit)
	}
	// A page of the listing reads every header (children come from the parents): about 0.3 s per
	// 100,000 sessions on an idle machine, so it gets more time than one query.
	ctx, cancel := context.WithTimeout(r.Context(), 6*s.o.QueryTimeout)
	defer cancel()
	var infos []client.SessionInfo
	next, err := s.c.Sessions(ctx, client.SessionsQuery{Prefix: lp.Prefix, After: lp.After, Limit: lp.Limit}, func(si client.SessionInfo) error {
		infos = append(infos, si)
		return nil
	})
	if err != nil {
		lp.Error = "The sessions cannot be listed: " + err.Error()
	}
	lp.Next = next
	lp.Rows = s.decorate(ctx, infos)
	s.render(w, http.StatusOK, "list.html", lp)
}

// decorate reads the title and turns views of each listed session, 8 at a time.
func (s *Server) decorate(ctx context.Context, infos []client.SessionInfo) []listRow {
	rows := make([]listRow, len(infos))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, si := range infos {
		rows[i].SessionInfo = si
		if si.Events == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(row *listRow) {
			defer func() { <-sem; wg.Done() }()
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if t, err := s.c.Projection(qctx, row.ID, projector.UnitTitle); err == nil {
				var v projector.TitleView
				if json.Unmarshal(t.View, &v) == nil && v.Title != nil {
					row.Title, row.TitleBytes = capTitle(v)
				}
			}
			if t, err := s.c.Projection(qctx, row.ID, projector.UnitTurns); err == nil {
				var v projector.TurnsState
				if json.Unmarshal(t.View, &v) == nil {
					row.OpenTurn, row.Folded = v.OpenTurn, true
				}
			}
		}(&rows[i])
	}
	wg.Wait()
	return rows
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
