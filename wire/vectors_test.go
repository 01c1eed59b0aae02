package wire

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// The wire test vectors, shared with the TypeScript package's tests (test/wire.spec.ts).
const vectorsFile = "testdata/vectors.json"

// text is a vector string: a JSON string, or {"repeat": s, "count": n} for s repeated n times.
type text string

func (t *text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = text(s)
		return nil
	}
	var r struct {
		Repeat string `json:"repeat"`
		Count  int    `json:"count"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*t = text(strings.Repeat(r.Repeat, r.Count))
	return nil
}

type vectorRef struct {
	Seq    int64  `json:"seq"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	ID     string `json:"id"`
	Chunks int    `json:"chunks,omitempty"` // format 3 refs only
}

func (v vectorRef) ref(t *testing.T) BlobRef {
	t.Helper()
	r := BlobRef{Seq: v.Seq, Size: v.Size, ID: v.ID, Chunks: v.Chunks}
	sum, err := hex.DecodeString(v.SHA256)
	if err != nil || len(sum) != len(r.SHA256) {
		t.Fatalf("vector sha256 %q", v.SHA256)
	}
	copy(r.SHA256[:], sum)
	return r
}

type vectors struct {
	Tokens []struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	} `json:"tokens"`
	BadIDs []struct {
		ID   text   `json:"id"`
		Rule string `json:"rule"`
	} `json:"badIds"`
	LongestIDs []struct {
		ID         text `json:"id"`
		TokenBytes int  `json:"tokenBytes"`
	} `json:"longestIds"`
	BadTokens  []text `json:"badTokens"`
	Partitions []struct {
		Token      string `json:"token"`
		Partitions int    `json:"partitions"`
		Partition  int    `json:"partition"`
	} `json:"partitions"`
	Subjects []struct {
		ID            string `json:"id"`
		Partitions    int    `json:"partitions"`
		Subject       string `json:"subject"`
		ErrorsSubject string `json:"errorsSubject"`
	} `json:"subjects"`
	Records []struct {
		ID      string            `json:"id"`
		Events  []session.Event   `json:"events"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	} `json:"records"`
	Decodes []struct {
		Name    string  `json:"name"`
		Headers Header  `json:"headers"`
		Body    string  `json:"body"`
		Seqs    []int64 `json:"seqs"`
		Blobs   []struct {
			Index int       `json:"index"`
			Ref   vectorRef `json:"ref"`
		} `json:"blobs"`
	} `json:"decodes"`
	DecodeRefusals []struct {
		Name    string `json:"name"`
		Headers Header `json:"headers"`
		Body    string `json:"body"`
		Rule    string `json:"rule"`
	} `json:"decodeRefusals"`
	BlobRefs []struct {
		Value string    `json:"value"`
		Ref   vectorRef `json:"ref"`
		Token string    `json:"token"`
		Name  string    `json:"name"`
	} `json:"blobRefs"`
	BadBlobValues []string `json:"badBlobValues"`
	ChunkBlobRefs []struct {
		Value    string    `json:"value"`
		Ref      vectorRef `json:"ref"`
		Token    string    `json:"token"`
		Subjects []string  `json:"subjects"`
		Filter   string    `json:"filter"`
	} `json:"chunkBlobRefs"`
	BadChunkBlobValues []string `json:"badChunkBlobValues"`
	HeaderWireSizes    []struct {
		Headers [][2]string `json:"headers"`
		Size    int         `json:"size"`
	} `json:"headerWireSizes"`
	ProjectionKeys []struct {
		Unit string `json:"unit"`
		ID   string `json:"id"`
		Key  string `json:"key"`
	} `json:"projectionKeys"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", vectorsFile, err)
	}
	if len(v.Tokens) == 0 || len(v.Records) == 0 || len(v.DecodeRefusals) == 0 || len(v.ProjectionKeys) == 0 {
		t.Fatalf("%s: a section is empty", vectorsFile)
	}
	return v
}

func TestVectorsTokens(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Tokens {
		got, err := Token(c.ID)
		if err != nil || got != c.Token {
			t.Errorf("Token(%q) = %q, %v; want %q", c.ID, got, err, c.Token)
			continue
		}
		checkTokenShape(t, c.ID, got)
		if back, err := IDFromToken(got); err != nil || back != c.ID {
			t.Errorf("IDFromToken(%q) = %q, %v; want %q", got, back, err, c.ID)
		}
	}
	for _, c := range v.BadIDs {
		var se *session.Error
		if _, err := Token(string(c.ID)); !errors.As(err, &se) || string(se.Rule) != c.Rule {
			t.Errorf("Token(%d bytes) = %v, want rule %s", len(c.ID), err, c.Rule)
		}
	}
	for _, c := range v.LongestIDs {
		tok, err := Token(string(c.ID))
		if err != nil || len(tok) != c.TokenBytes {
			t.Errorf("Token(%d bytes) = %d bytes, %v; want %d", len(c.ID), len(tok), err, c.TokenBytes)
		} else if back, err := IDFromToken(tok); err != nil || back != string(c.ID) {
			t.Errorf("round trip of a %d-byte id: %v", len(c.ID), err)
		}
	}
	for _, tok := range v.BadTokens {
		if id, err := IDFromToken(string(tok)); err == nil {
			t.Errorf("IDFromToken(%q) = %q, want an error", tok, id)
		}
	}
}

func TestVectorsSubjects(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Partitions {
		if got := Partition(c.Token, c.Partitions); got != c.Partition {
			t.Errorf("Partition(%q, %d) = %d, want %d", c.Token, c.Partitions, got, c.Partition)
		}
	}
	for _, c := range v.Subjects {
		s, err := SessionSubject(c.ID, c.Partitions)
		if err != nil || s != c.Subject {
			t.Errorf("SessionSubject(%q, %d) = %q, %v; want %q", c.ID, c.Partitions, s, err, c.Subject)
		}
		tok := mustToken(t, c.ID)
		if p, ptok, id, err := ParseSubject(s, c.Partitions); err != nil || id != c.ID || ptok != tok || p != Partition(tok, c.Partitions) {
			t.Errorf("ParseSubject(%q) = %d %q %q %v", s, p, ptok, id, err)
		}
		if e, err := ErrorsSubject(c.ID); err != nil || e != c.ErrorsSubject {
			t.Errorf("ErrorsSubject(%q) = %q, %v; want %q", c.ID, e, err, c.ErrorsSubject)
		}
	}
	for _, c := range v.ProjectionKeys {
		if got := ProjectionKey(c.Unit, mustToken(t, c.ID)); got != c.Key || CheckUnit(c.Unit) != nil {
			t.Errorf("ProjectionKey(%q, Token(%q)) = %q, want %q", c.Unit, c.ID, got, c.Key)
		}
	}
}

func TestVectorsRecords(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Records {
		h, body, err := EncodeRecord(c.ID, c.Events)
		if err != nil {
			t.Errorf("EncodeRecord(%q): %v", c.ID, err)
			continue
		}
		if string(body) != c.Body {
			t.Errorf("EncodeRecord(%q) body\n%s\nwant\n%s", c.ID, body, c.Body)
		}
		if len(h) != len(c.Headers) {
			t.Errorf("EncodeRecord(%q) headers %v, want %v", c.ID, h, c.Headers)
		}
		for k, want := range c.Headers {
			if got := h[k]; len(got) != 1 || got[0] != want {
				t.Errorf("EncodeRecord(%q) header %s = %v, want %q", c.ID, k, got, want)
			}
		}
		if evs, err := DecodeRecord(h, body); err != nil || len(evs) != len(c.Events) {
			t.Errorf("DecodeRecord of %q's record: %d events, %v", c.ID, len(evs), err)
		}
	}
	for _, c := range v.Decodes {
		rec, err := DecodeRecordAt(c.Headers, []byte(c.Body), 7)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		var seqs []int64
		for _, ev := range rec.Events {
			seqs = append(seqs, ev.Seq)
		}
		if !slices.Equal(seqs, c.Seqs) || len(rec.Blobs) != len(c.Blobs) {
			t.Errorf("%s: seqs %v, %d blobs; want %v, %d", c.Name, seqs, len(rec.Blobs), c.Seqs, len(c.Blobs))
			continue
		}
		for i, b := range c.Blobs {
			if rec.Blobs[i].Index != b.Index || rec.Blobs[i].Ref != b.Ref.ref(t) {
				t.Errorf("%s: blob %d = %+v, want index %d ref %+v", c.Name, i, rec.Blobs[i], b.Index, b.Ref)
			}
		}
	}
	for _, c := range v.DecodeRefusals {
		_, err := DecodeRecordAt(c.Headers, []byte(c.Body), 7)
		var se *session.Error
		if !errors.As(err, &se) || string(se.Rule) != c.Rule {
			t.Errorf("%s: %v, want rule %s", c.Name, err, c.Rule)
		}
	}
}

func TestVectorsBlobs(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.BlobRefs {
		ref := c.Ref.ref(t)
		got, ok := parseBlobRef(c.Value, RecordFormatBlobs)
		if !ok || got != ref || ref.HeaderValue() != c.Value || !ref.Legacy() {
			t.Errorf("blob value %q: parsed %+v, %v; value of the ref %q", c.Value, got, ok, ref.HeaderValue())
		}
		if name := BlobName(c.Token, ref); name != c.Name {
			t.Errorf("BlobName(%q, %+v) = %q, want %q", c.Token, ref, name, c.Name)
		}
		if tok, r, ok := ParseBlobName(c.Name); !ok || tok != c.Token || r.Seq != ref.Seq || r.ID != ref.ID {
			t.Errorf("ParseBlobName(%q) = %q %+v %v", c.Name, tok, r, ok)
		}
	}
	for _, bad := range v.BadBlobValues {
		if ref, ok := parseBlobRef(bad, RecordFormatBlobs); ok {
			t.Errorf("blob value %q accepted as %+v", bad, ref)
		}
	}
	if len(v.ChunkBlobRefs) == 0 || len(v.BadChunkBlobValues) == 0 {
		t.Fatal("no format 3 blob vectors")
	}
	for _, c := range v.ChunkBlobRefs {
		ref := c.Ref.ref(t)
		got, ok := parseBlobRef(c.Value, RecordFormatChunks)
		if !ok || got != ref || ref.HeaderValue() != c.Value || ref.Legacy() {
			t.Errorf("format 3 blob value %q: parsed %+v, %v; value of the ref %q", c.Value, got, ok, ref.HeaderValue())
		}
		if _, ok := parseBlobRef(c.Value, RecordFormatBlobs); ok {
			t.Errorf("format 3 blob value %q accepted in a format 2 record", c.Value)
		}
		if len(c.Subjects) != ref.Chunks {
			t.Errorf("%q: %d subjects for %d chunks", c.Value, len(c.Subjects), ref.Chunks)
		}
		for k, subj := range c.Subjects {
			if got := BlobChunkSubject(c.Token, ref.ID, k); got != subj {
				t.Errorf("BlobChunkSubject(%q, %q, %d) = %q, want %q", c.Token, ref.ID, k, got, subj)
			}
			if tok, id, kk, ok := ParseBlobSubject(subj); !ok || tok != c.Token || id != ref.ID || kk != k {
				t.Errorf("ParseBlobSubject(%q) = %q %q %d %v", subj, tok, id, kk, ok)
			}
		}
		if f := BlobChunksFilter(c.Token, ref.ID); f != c.Filter {
			t.Errorf("BlobChunksFilter = %q, want %q", f, c.Filter)
		}
	}
	for _, bad := range v.BadChunkBlobValues {
		if ref, ok := parseBlobRef(bad, RecordFormatChunks); ok {
			t.Errorf("format 3 blob value %q accepted as %+v", bad, ref)
		}
	}
	for _, c := range v.HeaderWireSizes {
		h := Header{}
		for _, kv := range c.Headers {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		if got := HeaderWireSize(h); got != c.Size {
			t.Errorf("HeaderWireSize(%v) = %d, want %d", c.Headers, got, c.Size)
		}
	}
}

func mustToken(t *testing.T, id string) string {
	t.Helper()
	tok, err := Token(id)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
