package store

import (
	"reflect"
	"testing"
)

// TestGetTailFromLeader: the leader's view of a session's tail equals the direct get's (on one
// node they agree), for a session with no records, one record, and several, msg id included.
func TestGetTailFromLeader(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	empty, err := sessionOf(s, "nobody").TailFromLeader(ctx)
	if err != nil || !reflect.DeepEqual(empty, Tail{}) {
		t.Fatalf("empty session: %+v, %v; want the zero Tail", empty, err)
	}
	r1, err := sessionOf(s, "a.b c").Append(ctx, 0, evs(0, 3, "x"), WithMsgID("m1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "a.b c").Append(ctx, r1.StreamSeq, evs(3, 5, "<y&>"), WithMsgID("m2")); err != nil {
		t.Fatal(err)
	}
	direct, err := sessionOf(s, "a.b c").Tail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := sessionOf(s, "a.b c").TailFromLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(direct, leader) || leader.LastMsgID != "m2" || leader.NextSeq != 5 {
		t.Fatalf("leader tail %+v, direct %+v; want equal, msg id m2, next seq 5", leader, direct)
	}
}
