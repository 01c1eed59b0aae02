package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentlog/agentlog/session"
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
	for i := copyKept(&b, id, 0); i < len(id); i = copyKept(&b, id, i+1) {
		c := id[i]
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
	for i := copyKept(&b, token, 0); i < len(token); i = copyKept(&b, token, i+3) {
		if c := token[i]; c != '_' {
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
	return TokenSubject(tok, partitions), nil
}

// TokenSubject returns agentlog.session.<partition>.<token> for a subject token (as Token makes
// it; not checked) with the given partition count.
func TokenSubject(token string, partitions int) string {
	return SubjectPrefix + "." + strconv.Itoa(Partition(token, partitions)) + "." + token
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

// copyKept writes to b the run of bytes that Token keeps as they are (keepByte) starting at s[i],
// and returns the index where it ends: len(s), or a byte to escape.
func copyKept(b *strings.Builder, s string, i int) int {
	j := i
	for j < len(s) && keepByte(s[j]) {
		j++
	}
	b.WriteString(s[i:j])
	return j
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

// checkID refuses an id Token cannot map, as a *session.Error (rule id-empty, id-too-long,
// id-utf8) naming it (an over-long one cut as QuoteID cuts it).
func checkID(id string) error {
	switch {
	case id == "":
		return session.NewError("", -1, 0, session.RuleIDEmpty, "the session id is empty")
	case len(id) > MaxSessionIDBytes:
		return session.NewError(echoID(id), -1, 0, session.RuleIDTooLong, fmt.Sprintf("the session id is %d bytes, more than %d", len(id), MaxSessionIDBytes))
	case !utf8.ValidString(id):
		return session.NewError(id, -1, 0, session.RuleIDUTF8, "the session id is not valid UTF-8")
	}
	return nil
}

// echoIDBytes is how much of an over-long id an error text echoes.
const echoIDBytes = 40

// QuoteID quotes id for an error text (as %q does). An id longer than MaxSessionIDBytes, which no
// session can have, is cut to its first 40 bytes (at a UTF-8 boundary) plus "...", so that an
// error never echoes an unbounded id (a description travels in one NATS header).
func QuoteID(id string) string {
	if len(id) <= MaxSessionIDBytes {
		return strconv.Quote(id)
	}
	return strconv.Quote(echoCut(id)) + "..."
}

// echoCut is the first echoIDBytes of id, cut at a UTF-8 boundary.
func echoCut(id string) string {
	n := echoIDBytes
	for n > echoIDBytes-utf8.UTFMax && !utf8.RuneStart(id[n]) {
		n--
	}
	return id[:n]
}

// echoID is id as an error names it: an id over MaxSessionIDBytes is cut to echoCut(id) + "...".
func echoID(id string) string {
	if len(id) <= MaxSessionIDBytes {
		return id
	}
	return echoCut(id) + "..."
}

// checkRawID applies rule id-utf8 to an id as it appears in a JSON request, before decoding: Go's
// decoding turns invalid UTF-8 bytes and lone surrogate escapes ("\ud800") into U+FFFD, so a
// request for an ill-formed id would otherwise name the session "\uFFFD". raw is the JSON value;
// a value that is not a string is left to the decoding. The error names the offending byte or
// escape and the rule.
func checkRawID(raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return nil
	}
	if !utf8.Valid(raw) {
		for i := 0; i < len(raw); {
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Errorf("session id: byte 0x%02X at offset %d of the JSON string is not valid UTF-8 (rule id-utf8)", raw[i], i-1)
			}
			i += size
		}
	}
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			return nil // malformed: left to the decoding
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+6 < len(raw) && raw[i+5] == '\\' && raw[i+6] == 'u' {
				if lo, ok := hex4(raw[i+7:]); ok && lo >= 0xDC00 && lo < 0xE000 {
					i += 10
					continue
				}
			}
			return fmt.Errorf("session id: escape %s is a lone surrogate, not a character (rule id-utf8)", raw[i-1:i+5])
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("session id: escape %s is a lone surrogate, not a character (rule id-utf8)", raw[i-1:i+5])
		}
		i += 4
	}
	return nil
}

// hex4 decodes the 4 hex digits that start b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v), err == nil
}

// CheckRawIDFields applies checkRawID to the top-level fields of the JSON object data that decode
// into the named fields (encoding/json matches names without regard to case). A request that is
// not a JSON object is left to the decoding (nil). The error is prefixed with the field's name.
func CheckRawIDFields(data []byte, fields ...string) error {
	if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) {
		return nil // nothing that decoding could turn into U+FFFD
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	for _, f := range fields {
		for k, v := range obj {
			if strings.EqualFold(k, f) {
				if err := checkRawID(v); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
		}
	}
	return nil
}
