package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Offloaded events (docs/PROTOCOL.md §4.1). An event whose encoded line does not fit in one record
// is stored as an object of the Object Store bucket BlobsBucket; its record (format
// RecordFormatBlobs) carries an empty line in its place and one HeaderBlob value naming it.
const (
	HeaderBlob        = "Agentlog-Blob" // one value per offloaded event: "<seq> <size> <sha256 hex> <id>"
	RecordFormatBlobs = "2"             // Agentlog-Format of a record that holds offloaded events
)

// BlobRef names an offloaded event: its seq, the size of its encoded line in bytes, the line's
// SHA-256, and the unique id (a nuid) of the object that holds it, BlobName(token, ref) in
// BlobsBucket. Each write of a blob makes a new object, so no object is ever overwritten.
type BlobRef struct {
	Seq    int64
	Size   int64
	SHA256 [sha256.Size]byte
	ID     string
}

// BlobLine is an offloaded event of a decoded record: its index among the record's events, and
// its ref.
type BlobLine struct {
	Index int
	Ref   BlobRef
}

// BlobName is the object name of ref in session token's namespace: "<token>/<seq>/<id>".
func BlobName(token string, ref BlobRef) string {
	return token + "/" + strconv.FormatInt(ref.Seq, 10) + "/" + ref.ID
}

// HeaderValue is ref's HeaderBlob value: "<seq> <size> <sha256 hex> <id>".
func (ref BlobRef) HeaderValue() string {
	return strconv.FormatInt(ref.Seq, 10) + " " + strconv.FormatInt(ref.Size, 10) + " " + hex.EncodeToString(ref.SHA256[:]) + " " + ref.ID
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

// parseBlobRef parses a HeaderBlob value; ok is false when it is not canonical.
func parseBlobRef(v string) (BlobRef, bool) {
	f := strings.Split(v, " ")
	if len(f) != 4 {
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
	for _, v := range h[HeaderBlob] {
		if ref, ok := parseBlobRef(v); ok {
			out = append(out, ref)
		}
	}
	return out
}
