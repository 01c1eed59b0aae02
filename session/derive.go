package session

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// deriveEvent is the reference's deriveEventMessage for one event, with JavaScript's failure
// modes: user/message gives data; assistant/message gives data.message, or nothing when its
// content is empty; tool/result gives data.message; anything else gives nothing. Like
// Session.deriveMessages it then skips a falsy result. The error is the read the reference fails
// on (a TypeError).
func deriveEvent(typ string, data *jsvalue.Value) (*jsvalue.Value, error) {
	var msg *jsvalue.Value
	switch typ {
	case "user/message":
		msg = data
	case "assistant/message":
		content, err := access(typ, data, "data", "message", "content")
		if err != nil {
			err.hint = oldFormatHint(data)
			return nil, err
		}
		if jsvalue.IsNullish(content) {
			return nil, &shapeError{typ: typ, path: "data.message.content", val: content, reading: "length", hint: oldFormatHint(data)}
		}
		if n, _ := jsvalue.Get(content, "length"); n != nil && n.Kind() == jsvalue.Number && n.Num() == 0 {
			return nil, nil
		}
		msg, _ = jsvalue.Get(data, "message")
	case "tool/result":
		if data != nil && data.Kind() == jsvalue.Null {
			return nil, &shapeError{typ: typ, path: "data", val: data, reading: "message"}
		}
		msg, _ = jsvalue.Get(data, "message")
	default:
		return nil, nil
	}
	if !jsvalue.Truthy(msg) {
		return nil, nil
	}
	return msg, nil
}

// DeriveMessages derives the model-visible messages of the given surface nodes (in order) from
// the events that event returns by seq, applying the reference's deriveEventMessage per node:
// user/message gives its data, assistant/message its data.message (nothing when the content is
// empty), tool/result its data.message. Each message is the exact bytes of the event it comes
// from (a sub-slice of Event.Data), except that ill-formed UTF-8 is decoded as the reference reads
// it (WellFormed: U+FFFD). Errors name the node's seq: the lookup failed, the data is not
// JSON, or (rule event-shape) the data cannot be derived.
func DeriveMessages(nodes []int64, event func(seq int64) (Event, error)) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(nodes))
	for _, seq := range nodes {
		ev, err := event(seq)
		if err != nil {
			return nil, newError("", seq, 0, RuleLookup, fmt.Sprintf("reading surface node %d: %v", seq, err))
		}
		if !isSurfaceType(ev.Type) {
			continue
		}
		data, err := jsvalue.Parse(ev.Data)
		if err != nil {
			return nil, newError("", seq, 0, RuleJSON, fmt.Sprintf("session event %q data: %v", ev.Type, err))
		}
		msg, err := deriveEvent(ev.Type, data)
		if err != nil {
			return nil, newError("", seq, 0, RuleEventShape, err.Error())
		}
		if msg != nil {
			out = append(out, json.RawMessage(WellFormed(msg.Raw())))
		}
	}
	return out, nil
}
