package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Cold storage of archived sessions (docs/PROTOCOL.md §13). An archived session's log is held by
// the stream ArchiveStream: a head message on ArchiveSubject(token) and, for an archive larger
// than one message, parts on ArchivePartSubject(token, archiveID, k). The payload (the parts'
// bodies in order, then the head's) is two zstd frames: the session's packed JSONL (the bytes of
// `agentlog events ID --packed`, offloaded events inline), then a JSON object of the projection
// states the session had when it was archived ({"<unit>": <stored value>, ...}).
const (
	ArchiveStream = "AGENTLOG_ARCHIVE"
	ArchivePrefix = "agentlog.archive" // agentlog.archive.<token> (head), agentlog.archive.<token>.<archive id>.<k> (parts)

	// LifecycleBucket is the KV bucket of the lifecycle policy (key LifecyclePolicyKey) and of the
	// legal holds (key HoldKey(token)).
	LifecycleBucket    = "agentlog_lifecycle"
	LifecyclePolicyKey = "policy"

	// ChildrenStream indexes forks by parent: one empty message per child on
	// ChildSubject(parent token, child token), so that a session's children are found without a
	// pass over every header.
	ChildrenStream = "AGENTLOG_CHILDREN"
	ChildrenPrefix = "agentlog.children" // agentlog.children.<parent token>.<child token>
)

// Headers of an archive's head message (ArchiveSubject). Parts carry HeaderArchiveID and
// HeaderArchivePart only.
const (
	HeaderArchiveFormat      = "Agentlog-Archive-Format" // ArchiveFormat
	HeaderArchiveID          = "Agentlog-Archive-Id"     // a nuid, one per archive written
	HeaderArchiveEvents      = "Agentlog-Events"         // events archived (the log is seqs 0..n-1), decimal ≥ 1
	HeaderArchiveActivity    = "Agentlog-Last-Activity"  // when the hot stream stored the last record archived, Unix ms
	HeaderArchiveArchivedAt  = "Agentlog-Archived-At"    // when the archive was written, Unix ms
	HeaderArchiveJSONLSize   = "Agentlog-JSONL-Size"     // bytes of the packed JSONL, decimal
	HeaderArchiveJSONLSHA256 = "Agentlog-JSONL-SHA256"   // SHA-256 of the packed JSONL, 64 lowercase hex digits
	HeaderArchiveCompression = "Agentlog-Compression"    // ArchiveCompression
	HeaderArchiveParts       = "Agentlog-Archive-Parts"  // messages of the payload, the head included, decimal ≥ 1
	HeaderArchivePart        = "Agentlog-Archive-Part"   // a part's position, 1..parts-1
	HeaderArchivePayload     = "Agentlog-Payload"        // "<payload bytes> <projections bytes>": the zstd frame's size, the projections' size in it
	HeaderArchiveListing     = "Agentlog-Listing"        // JSON: what a listing shows of the session (ArchiveListing)
	ArchiveFormat            = "1"
	ArchiveCompression       = "zstd"
)

// ArchiveSubject is the subject of the head of session token's archive.
func ArchiveSubject(token string) string { return ArchivePrefix + "." + token }

// ArchivePartSubject is the subject of part k (1-based) of archive archiveID of session token.
func ArchivePartSubject(token, archiveID string, k int) string {
	return ArchivePrefix + "." + token + "." + archiveID + "." + strconv.Itoa(k)
}

// ArchivePartsFilter matches every part of every archive of session token (not its head).
func ArchivePartsFilter(token string) string { return ArchivePrefix + "." + token + ".>" }

// HoldKey is the agentlog_lifecycle key of the legal hold of session token.
func HoldKey(token string) string { return "hold." + token }

// ChildSubject is the AGENTLOG_CHILDREN subject linking child token to its parent token.
func ChildSubject(parentToken, childToken string) string {
	return ChildrenPrefix + "." + parentToken + "." + childToken
}

// ArchiveListing is what a listing shows of an archived session, kept in its head so that a
// listing reads no payload: the title (CutTitle), the open turn and the stopped units.
type ArchiveListing struct {
	Title    string   `json:"title,omitempty"`
	OpenTurn *int64   `json:"openTurn,omitempty"`
	Stopped  []string `json:"stopped,omitempty"`
}

// ArchiveHead is the decoded head of an archive.
type ArchiveHead struct {
	Token       string
	ID          string // the session id (from Token)
	Incarnation string // the session's incarnation ("" for a legacy session)
	ArchiveID   string
	Events      int64
	// LastActivity is when the last archived record was stored, ArchivedAt when the archive was
	// written (Unix ms).
	LastActivity, ArchivedAt int64
	JSONLSize                int64
	JSONLSHA256              [sha256.Size]byte
	Parts                    int
	// PayloadBytes is the size of the payload (the zstd frame), ProjectionsSize that of the
	// projection states' JSON inside it (after the JSONL).
	PayloadBytes, ProjectionsSize int64
	Listing                       ArchiveListing
}

// PayloadSize is the payload's size in bytes (the parts' and the head's bodies together).
func (a ArchiveHead) PayloadSize() int64 { return a.PayloadBytes }

// Header renders the head's headers.
func (a ArchiveHead) Header() Header {
	h := Header{
		HeaderArchiveFormat:      {ArchiveFormat},
		HeaderSession:            {a.Token},
		HeaderArchiveID:          {a.ArchiveID},
		HeaderArchiveEvents:      {strconv.FormatInt(a.Events, 10)},
		HeaderArchiveActivity:    {strconv.FormatInt(a.LastActivity, 10)},
		HeaderArchiveArchivedAt:  {strconv.FormatInt(a.ArchivedAt, 10)},
		HeaderArchiveJSONLSize:   {strconv.FormatInt(a.JSONLSize, 10)},
		HeaderArchiveJSONLSHA256: {hex.EncodeToString(a.JSONLSHA256[:])},
		HeaderArchiveCompression: {ArchiveCompression},
		HeaderArchiveParts:       {strconv.Itoa(a.Parts)},
		HeaderArchivePayload:     {strconv.FormatInt(a.PayloadBytes, 10) + " " + strconv.FormatInt(a.ProjectionsSize, 10)},
	}
	if a.Incarnation != "" {
		h[IncarnationHeader] = []string{a.Incarnation}
	}
	if l, err := json.Marshal(a.Listing); err == nil && string(l) != "{}" {
		h[HeaderArchiveListing] = []string{string(l)}
	}
	return h
}

// ParseArchiveHead decodes an archive head's headers; an error names the rule broken (a head
// this code did not write, or another format).
func ParseArchiveHead(h Header) (ArchiveHead, error) {
	var a ArchiveHead
	get := func(k string) (string, error) {
		vs := h[k]
		if len(vs) != 1 {
			return "", fmt.Errorf("archive head: header %s has %d values, want 1", k, len(vs))
		}
		return vs[0], nil
	}
	num := func(k string, min int64) (int64, error) {
		s, err := get(k)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < min || strconv.FormatInt(n, 10) != s {
			return 0, fmt.Errorf("archive head: header %s is %q, want a decimal integer ≥ %d", k, s, min)
		}
		return n, nil
	}
	f, err := get(HeaderArchiveFormat)
	if err != nil {
		return a, err
	}
	if f != ArchiveFormat {
		return a, fmt.Errorf("archive head: header %s is %q, this code reads %q", HeaderArchiveFormat, f, ArchiveFormat)
	}
	if a.Token, err = get(HeaderSession); err != nil {
		return a, err
	}
	if a.ID, err = IDFromToken(a.Token); err != nil {
		return a, fmt.Errorf("archive head: header %s: %w", HeaderSession, err)
	}
	if vs := h[IncarnationHeader]; len(vs) > 0 {
		a.Incarnation = vs[0]
	}
	if a.ArchiveID, err = get(HeaderArchiveID); err != nil {
		return a, err
	}
	if !validBlobID(a.ArchiveID) {
		return a, fmt.Errorf("archive head: header %s is %q, want 1..64 of [0-9A-Za-z]", HeaderArchiveID, a.ArchiveID)
	}
	if a.Events, err = num(HeaderArchiveEvents, 1); err != nil {
		return a, err
	}
	if a.LastActivity, err = num(HeaderArchiveActivity, 0); err != nil {
		return a, err
	}
	if a.ArchivedAt, err = num(HeaderArchiveArchivedAt, 0); err != nil {
		return a, err
	}
	if a.JSONLSize, err = num(HeaderArchiveJSONLSize, 1); err != nil {
		return a, err
	}
	sum, err := get(HeaderArchiveJSONLSHA256)
	if err != nil {
		return a, err
	}
	if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != sum {
		return a, fmt.Errorf("archive head: header %s is %q, want 64 lowercase hex digits", HeaderArchiveJSONLSHA256, sum)
	} else {
		copy(a.JSONLSHA256[:], b)
	}
	if c, err := get(HeaderArchiveCompression); err != nil {
		return a, err
	} else if c != ArchiveCompression {
		return a, fmt.Errorf("archive head: header %s is %q, this code reads %q", HeaderArchiveCompression, c, ArchiveCompression)
	}
	parts, err := num(HeaderArchiveParts, 1)
	if err != nil {
		return a, err
	}
	a.Parts = int(parts)
	p, err := get(HeaderArchivePayload)
	if err != nil {
		return a, err
	}
	ps := strings.Split(p, " ")
	var e1, e2 error
	if len(ps) == 2 {
		a.PayloadBytes, e1 = strconv.ParseInt(ps[0], 10, 64)
		a.ProjectionsSize, e2 = strconv.ParseInt(ps[1], 10, 64)
	}
	if len(ps) != 2 || e1 != nil || e2 != nil || a.PayloadBytes < 1 || a.ProjectionsSize < 2 {
		return a, fmt.Errorf("archive head: header %s is %q, want \"<payload bytes> <projections bytes>\"", HeaderArchivePayload, p)
	}
	if vs := h[HeaderArchiveListing]; len(vs) > 0 {
		_ = json.Unmarshal([]byte(vs[0]), &a.Listing) // display only
	}
	return a, nil
}

// IsArchivePart reports whether subject is an archive part's (ArchivePartSubject) rather than a
// head's.
func IsArchivePart(subject string) bool {
	rest, ok := strings.CutPrefix(subject, ArchivePrefix+".")
	return ok && strings.Contains(rest, ".")
}

// MaxTitleBytes is the longest title a listing or an archive head carries, bytes (as the title
// unit's view caps it).
const MaxTitleBytes = 256

// CutTitle cuts a title longer than MaxTitleBytes at a UTF-8 boundary and marks the cut with "…"
// (the mark beyond the limit); a shorter one is returned as it is.
func CutTitle(s string) string {
	if len(s) <= MaxTitleBytes {
		return s
	}
	i := MaxTitleBytes
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
