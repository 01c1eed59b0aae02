package projector

import (
	"encoding/json"
	"maps"
	"reflect"
	"testing"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// toolsV1 is the tools unit of stateVersion 1, which decoded the whole data with encoding/json:
// the reference TestFoldFromTheDecoderScan holds version 2 to on the recorded sessions.
var toolsV1 = Def[ToolsState]{
	Key: "tools-v1", StateVersion: 1, Reads: []string{"tool/call", "tool/result"},
	Init: func() ToolsState { return ToolsState{ByName: map[string]ToolCounts{}, Open: map[string]string{}} },
	Apply: func(s ToolsState, ev session.Event) (ToolsState, error) {
		next := cloneTools(s)
		if ev.Type == "tool/call" {
			var d struct {
				CallID *string `json:"callId"`
				Name   *string `json:"name"`
			}
			if err := json.Unmarshal(session.WellFormed(ev.Data), &d); err != nil || d.CallID == nil || d.Name == nil {
				return s, unitDataError(ev, `{callId: string, name: string, ...}`, err)
			}
			c := next.ByName[*d.Name]
			c.Calls++
			next.ByName[*d.Name] = c
			next.Open[*d.CallID] = *d.Name
			return next, nil
		}
		var d struct {
			Message struct {
				Content []struct {
					Type       string `json:"type"`
					ToolCallID string `json:"toolCallId"`
					IsError    bool   `json:"isError"`
				} `json:"content"`
				Source struct {
					CallID string `json:"callId"`
				} `json:"source"`
			} `json:"message"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(session.WellFormed(ev.Data), &d); err != nil {
			return s, unitDataError(ev, `{message: {content, source: {callId}}, error?}`, err)
		}
		callID := d.Message.Source.CallID
		isErr := len(d.Error) > 0 && string(d.Error) != "null"
		for _, b := range d.Message.Content {
			if b.Type == "tool-result" {
				if callID == "" {
					callID = b.ToolCallID
				}
				isErr = isErr || b.IsError
			}
		}
		name := next.Open[callID]
		delete(next.Open, callID)
		c := next.ByName[name]
		c.Results++
		if isErr {
			c.Errors++
		}
		next.ByName[name] = c
		return next, nil
	},
}

// TestFoldFromTheDecoderScan folds every recorded session twice, from the events as the record
// decoder scans them (wire.ScanRecord, records of up to 5 events sharing a scanner) and from
// plain events (each scanned when first read): every unit's view is the same, and the tools
// unit (version 2, reading the scan) equals version 1 (encoding/json over the whole data).
func TestFoldFromTheDecoderScan(t *testing.T) {
	files := sessiontest.RecordedLogs(t, dshDir)
	reg, err := NewRegistry(toolsV1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		h, evs := sessiontest.ReadLog(t, f.Path, f.Name)
		hdr := session.Header{ID: f.Name}
		if h != nil {
			hdr = *h
			hdr.ID = f.Name
		}
		plain, err := FoldSession(reg, hdr, evs)
		if err != nil {
			t.Fatal(err)
		}
		ss := newSessState(reg.list(), "", hdr)
		for start := 0; start < len(evs); start += 5 {
			rh, body, err := wire.EncodeRecord(f.Name, evs[start:min(start+5, len(evs))])
			if err != nil {
				t.Fatal(err)
			}
			rec, err := wire.ScanRecord(rh, body)
			if err != nil {
				t.Fatal(err)
			}
			if err := ss.apply(rec.Events, &logLookup{id: f.Name, batch: rec.Events}); err != nil {
				t.Fatal(err)
			}
		}
		scanned, err := ss.views()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plain, scanned) {
			for k := range maps.Keys(plain.Units) {
				if !reflect.DeepEqual(plain.Units[k], scanned.Units[k]) {
					t.Errorf("%s: unit %s: plain %s, scanned %s", f.Name, k, plain.Units[k].View, scanned.Units[k].View)
				}
			}
			t.Fatalf("%s: the folds differ", f.Name)
		}
		v1, v2 := plain.Units["tools-v1"], plain.Units[UnitTools]
		if string(v1.View) != string(v2.View) || (v1.Error == nil) != (v2.Error == nil) {
			t.Errorf("%s: tools v2 %s (%v), v1 %s (%v)", f.Name, v2.View, v2.Error, v1.View, v1.Error)
		}
	}
}
