package jetstream

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxSessionIDBytes is the longest session id (in bytes of UTF-8) that Token accepts.
const MaxSessionIDBytes = 256

// Token maps a session id (any UTF-8, 1..256 bytes) to its subject token: injective, reversible,
// never containing '.', '*', '>', whitespace or control characters. Errors name the id and the rule.
//
// Every byte but [A-Za-z0-9-] (so '_' too, and each byte of a multi-byte character) is written
// '_' plus two uppercase hex digits: "a.b" → "a_2Eb", "é" → "_C3_A9"; a token is also a valid KV
// key part. Rules named in errors: "id-empty", "id-too-long", "id-utf8".
func Token(id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(id))
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keepByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexUpper[c>>4])
		b.WriteByte(hexUpper[c&0x0f])
	}
	return b.String(), nil
}

// IDFromToken reverses Token. It refuses every token that Token cannot produce (bytes outside
// [A-Za-z0-9_-], a truncated or lowercase escape, an escape of a byte that is kept as is, a result
// that is not 1..256 bytes of valid UTF-8), so that the mapping stays a bijection. Rule named in
// errors: "token-canonical", plus the id rules of Token.
func IDFromToken(token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("subject token %q: empty (rule token-canonical)", token)
	}
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if keepByte(c) {
			b.WriteByte(c)
			continue
		}
		if c != '_' {
			return "", fmt.Errorf("subject token %q: byte 0x%02X at offset %d is not in [A-Za-z0-9_-] (rule token-canonical)", token, c, i)
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("subject token %q: truncated escape at offset %d (rule token-canonical)", token, i)
		}
		hi, ok1 := unhexUpper(token[i+1])
		lo, ok2 := unhexUpper(token[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("subject token %q: escape %q at offset %d is not '_' plus two uppercase hex digits (rule token-canonical)", token, token[i:i+3], i)
		}
		v := hi<<4 | lo
		if keepByte(v) {
			return "", fmt.Errorf("subject token %q: escape %q at offset %d encodes %q, which is kept unescaped (rule token-canonical)", token, token[i:i+3], i, string(rune(v)))
		}
		b.WriteByte(v)
		i += 2
	}
	id := b.String()
	if err := checkID(id); err != nil {
		return "", fmt.Errorf("subject token %q: %w", token, err)
	}
	return id, nil
}

// Partition returns the partition of a subject token: FNV-1a 32-bit of the token's bytes modulo
// partitions. partitions must be ≥ 1; a smaller value is treated as 1.
func Partition(token string, partitions int) int {
	if partitions < 1 {
		partitions = 1
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(token))
	return int(h.Sum32() % uint32(partitions))
}

// SessionSubject returns agentlog.session.<partition>.<token> for id with the given partition
// count. Errors are Token's.
func SessionSubject(id string, partitions int) (string, error) {
	tok, err := Token(id)
	if err != nil {
		return "", err
	}
	return SubjectPrefix + "." + strconv.Itoa(Partition(tok, partitions)) + "." + tok, nil
}

// Subject returns agentlog.session.<partition>.<token> for id.
func (s *Store) Subject(id string) (string, error) {
	return SessionSubject(id, s.Partitions)
}

// PartitionSubject returns the filter subject agentlog.session.<p>.* that selects every session of
// partition p (for projectors that divide the partitions between them).
func PartitionSubject(p int) string {
	return SubjectPrefix + "." + strconv.Itoa(p) + ".*"
}

// ParseSubject splits a session subject agentlog.session.<partition>.<token> into its partition,
// its token and the session id. It refuses other subjects, a partition that is not the token's
// (for partitions ≥ 1), and non-canonical tokens. Rule named in errors: "subject-shape".
func ParseSubject(subject string, partitions int) (partition int, token, id string, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return 0, "", "", fmt.Errorf("subject %q does not start with %s. (rule subject-shape)", subject, SubjectPrefix)
	}
	ps, tok, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(tok, ".") {
		return 0, "", "", fmt.Errorf("subject %q is not %s.<partition>.<token> (rule subject-shape)", subject, SubjectPrefix)
	}
	p, perr := strconv.Atoi(ps)
	if perr != nil || p < 0 || strconv.Itoa(p) != ps {
		return 0, "", "", fmt.Errorf("subject %q: partition %q is not a canonical non-negative integer (rule subject-shape)", subject, ps)
	}
	id, err = IDFromToken(tok)
	if err != nil {
		return 0, "", "", err
	}
	if partitions >= 1 && Partition(tok, partitions) != p {
		return 0, "", "", fmt.Errorf("subject %q: session %q belongs to partition %d of %d, not %d (rule subject-shape)", subject, id, Partition(tok, partitions), partitions, p)
	}
	return p, tok, id, nil
}

// ErrorsSubject returns agentlog.errors.<token> for id: where agent/error reports of the session
// are published.
func ErrorsSubject(id string) (string, error) {
	tok, err := Token(id)
	if err != nil {
		return "", err
	}
	return ErrorsPrefix + "." + tok, nil
}

const hexUpper = "0123456789ABCDEF"

func keepByte(c byte) bool {
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
}

func unhexUpper(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("session id %q: empty (rule id-empty)", id)
	case len(id) > MaxSessionIDBytes:
		return fmt.Errorf("session id %.40q...: %d bytes, more than %d (rule id-too-long)", id, len(id), MaxSessionIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("session id %q: not valid UTF-8 (rule id-utf8)", id)
	}
	return nil
}
