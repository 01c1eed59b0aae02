// Package jsvalue models the JavaScript values JSON.parse produces, so that Go code can reproduce
// exactly what JavaScript does with them: property access on undefined or null (Get, a TypeError),
// typeof tests, === (StrictEqual), deep equality, object spread, String(x) (ToString, NumberString)
// and JSON.stringify (Stringify, Quote).
//
// Parse keeps, for every value, the exact bytes it was read from (Raw), so that data can be handed
// back byte for byte. Strings are decoded the way Node reads a UTF-8 file and JSON.parse decodes
// escapes: invalid UTF-8 becomes U+FFFD (the WHATWG decoder), and a lone UTF-16 surrogate written
// as an escape is kept in its 3-byte WTF-8 form, so that Stringify writes it back as the escape.
// A nil *Value is undefined. Scan, ParseShallow, Lookup and Scanner validate or read JSON without
// building all of it.
package jsvalue
