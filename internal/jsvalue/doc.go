// Package jsvalue models the values JSON.parse produces, so that Go reproduces what JavaScript
// does with them: property access (Get; a TypeError on undefined or null), typeof, ===
// (StrictEqual), String(x) (ToString, NumberString) and JSON.stringify (Stringify, Quote).
//
// Parse keeps each value's source bytes (Raw). Strings decode as Node reads a UTF-8 file: invalid
// UTF-8 becomes U+FFFD, and an escaped lone surrogate is kept as 3-byte WTF-8 so that Stringify
// writes the escape back. A nil *Value is undefined. Scan, ParseShallow, Lookup and Scanner read
// JSON without building all of it. Why this exists: ARCHITECTURE.md, "Packages".
package jsvalue
