package wire

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Offloaded events (docs/PROTOCOL.md §4.1). An event whose encoded line does not fit in one record
// is stored as a blob: its chunks are messages of the write-once stream BlobStream, on
// BlobChunkSubject(token, id, k), k = 0..chunks-1. Its record (format RecordFormatChunks) carries
// an empty line in its place and one HeaderBlob value naming it. Records of format
// RecordFormatBlobs (legacy) name objects of the Object Store bucket BlobsBucket instead; they
// are still read, never written.
const (
	HeaderBlob = "Agentlog-Blob" // one value per offloaded event: "<seq> <size> <sha256 hex> <id> <chunks>" (format 3), "<seq> <size> <sha256 hex> <id>" (format 2)
	// RecordFormatBlobs is the Agentlog-Format of a legacy record whose offloaded events are
	// objects of BlobsBucket (read only).
	RecordFormatBlobs = "2"
	// RecordFormatChunks is the Agentlog-Format of a record whose offloaded events are blobs of
	// BlobStream (what writers write).
	RecordFormatChunks = "3"

	BlobStream = "AGENTLOG_BLOBS" // the write-once stream of blob chunks (one message per subject)
	BlobPrefix = "agentlog.blob"  // agentlog.blob.<token>.<blob id>.<chunk index>
	// BlobIDBytes is the length of a blob id of format 3: 32 lowercase hex digits (128 random bits).
	BlobIDBytes = 32
)

// BlobRef names an offloaded event: its seq, the size of its encoded line in bytes, the line's
// SHA-256, the blob's id and, for a blob of BlobStream, its chunk count. Chunks is 0 for a legacy
// ref (format 2): the object BlobName(token, ref) of BlobsBucket, whose id is a nuid.
type BlobRef struct {
	Seq    int64
	Size   int64
	SHA256 [sha256.Size]byte
	ID     string
	Chunks int
}

// Legacy reports whether ref names an object of BlobsBucket (format 2) rather than a blob of
// BlobStream.
func (ref BlobRef) Legacy() bool { return ref.Chunks == 0 }

// NewBlobID returns a fresh blob id: 128 bits of crypto/rand as 32 lowercase hex digits, so that
// no one can guess (and so pre-empt) the subjects of a blob not yet written.
func NewBlobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// BlobChunkSubject is the subject of chunk k of blob id of session token: "agentlog.blob.<token>.<id>.<k>".
func BlobChunkSubject(token, id string, k int) string {
	return BlobPrefix + "." + token + "." + id + "." + strconv.Itoa(k)
}

// BlobChunksFilter is the subject filter of every chunk of blob id: "agentlog.blob.<token>.<id>.*".
func BlobChunksFilter(token, id string) string { return BlobPrefix + "." + token + "." + id + ".*" }

// BlobSessionFilter is the subject filter of every blob of session token: "agentlog.blob.<token>.>".
func BlobSessionFilter(token string) string { return BlobPrefix + "." + token + ".>" }

// ParseBlobSubject splits a chunk subject of BlobStream into the session token, the blob id and
// the chunk index; ok is false for a subject agentlog does not make.
func ParseBlobSubject(subject string) (token, id string, k int, ok bool) {
	rest, found := strings.CutPrefix(subject, BlobPrefix+".")
	if !found {
		return "", "", 0, false
	}
	f := strings.Split(rest, ".")
	if len(f) != 3 || !validChunkBlobID(f[1]) {
		return "", "", 0, false
	}
	if _, err := IDFromToken(f[0]); err != nil {
		return "", "", 0, false
	}
	k, err := strconv.Atoi(f[2])
	if err != nil || k < 0 || strconv.Itoa(k) != f[2] {
		return "", "", 0, false
	}
	return f[0], f[1], k, true
}

// validChunkBlobID: BlobIDBytes bytes of [0-9a-f].
func validChunkBlobID(id string) bool {
	if len(id) != BlobIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// BlobLine is an offloaded event of a decoded record: its index among the record's events, and
// its ref.
type BlobLine struct {
	Index int
	Ref   BlobRef
}

// BlobName is the object name of a legacy ref in session token's namespace of BlobsBucket:
// "<token>/<seq>/<id>".
func BlobName(token string, ref BlobRef) string {
	return token + "/" + strconv.FormatInt(ref.Seq, 10) + "/" + ref.ID
}

// HeaderValue is ref's HeaderBlob value: "<seq> <size> <sha256 hex> <id> <chunks>", or without
// the chunk count for a legacy ref.
func (ref BlobRef) HeaderValue() string {
	v := strconv.FormatInt(ref.Seq, 10) + " " + strconv.FormatInt(ref.Size, 10) + " " + hex.EncodeToString(ref.SHA256[:]) + " " + ref.ID
	if ref.Chunks > 0 {
		v += " " + strconv.Itoa(ref.Chunks)
	}
	return v
}

// HeaderBytes is what one HeaderBlob value adds to a record's headers on the wire, bytes.
func (ref BlobRef) HeaderBytes() int { return len(HeaderBlob) + len(ref.HeaderValue()) + 4 }

// validBlobID: 1..64 bytes of [0-9A-Za-z].
func validBlobID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// parseBlobRef parses a HeaderBlob value of a record of format: 4 fields (a nuid id) for
// RecordFormatBlobs, 5 (a BlobIDBytes hex id and a chunk count, 1..size) for RecordFormatChunks;
// ok is false when it is not canonical.
func parseBlobRef(v, format string) (BlobRef, bool) {
	f := strings.Split(v, " ")
	want := 4
	if format == RecordFormatChunks {
		want = 5
	}
	if len(f) != want {
		return BlobRef{}, false
	}
	seq, err1 := strconv.ParseInt(f[0], 10, 64)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	sum, err3 := hex.DecodeString(f[2])
	if err1 != nil || err2 != nil || err3 != nil || seq < 0 || size < 1 || len(sum) != sha256.Size || !validBlobID(f[3]) ||
		strconv.FormatInt(seq, 10) != f[0] || strconv.FormatInt(size, 10) != f[1] || hex.EncodeToString(sum) != f[2] {
		return BlobRef{}, false
	}
	ref := BlobRef{Seq: seq, Size: size, ID: f[3]}
	copy(ref.SHA256[:], sum)
	if want == 5 {
		n, err := strconv.Atoi(f[4])
		if err != nil || n < 1 || int64(n) > size || strconv.Itoa(n) != f[4] || !validChunkBlobID(f[3]) {
			return BlobRef{}, false
		}
		ref.Chunks = n
	}
	return ref, true
}

// ParseBlobName splits an object name of BlobsBucket into the session token and the ref's seq
// and id (Size and SHA256 are left zero); ok is false for a name agentlog did not make.
func ParseBlobName(name string) (token string, ref BlobRef, ok bool) {
	f := strings.Split(name, "/")
	if len(f) != 3 {
		return "", BlobRef{}, false
	}
	if _, err := IDFromToken(f[0]); err != nil {
		return "", BlobRef{}, false
	}
	seq, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != f[1] || !validBlobID(f[2]) {
		return "", BlobRef{}, false
	}
	return f[0], BlobRef{Seq: seq, ID: f[2]}, true
}

// RecordBlobs returns the blobs a record's headers name (none for a format 1 record), for a
// headers-only reader. A malformed HeaderBlob value is skipped.
func RecordBlobs(h Header) []BlobRef {
	var out []BlobRef
	format := ""
	if fs := h[HeaderFormat]; len(fs) == 1 {
		format = fs[0]
	}
	for _, v := range h[HeaderBlob] {
		if ref, ok := parseBlobRef(v, format); ok {
			out = append(out, ref)
		}
	}
	return out
}
