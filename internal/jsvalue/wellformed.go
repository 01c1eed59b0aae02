package jsvalue

import "unicode/utf8"

// AppendWellFormed appends b decoded as Node decodes a file (the WHATWG UTF-8 decoder): each
// maximal ill-formed subsequence becomes one U+FFFD.
func AppendWellFormed(dst, b []byte) []byte {
	if utf8.Valid(b) {
		return append(dst, b...)
	}
	return []byte(decodeUTF8Lossy(dst, b))
}
