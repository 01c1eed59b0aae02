// Package wire is agentlog's wire format, with no I/O (docs/PROTOCOL.md): the names of the stream,
// buckets, headers and subjects; the session id to subject token mapping (Token, IDFromToken) and
// partitions (Partition, SessionSubject, ParseSubject); the record codec (EncodeRecord,
// DecodeRecord); offloaded events' refs, chunk subjects and legacy object names (BlobRef, BlobChunkSubject, BlobName); incarnations. It is
// the Go twin of typescript/dsh-persistence/src/wire.ts. Package store does the I/O.
//
// Errors name the session id and the rule broken: *session.Error for an id and a record.
package wire
