package store

import (
	"strings"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// NewJetStream returns a JetStream context over nc for the JetStream domain domain ("" : the
// account's own JetStream, natsjs.New; else natsjs.NewWithDomain, whose API requests go to
// $JS.<domain>.API.>). A client of a leaf node reaches the hub's agentlog with the hub's domain.
// opts are nats.go's. A domain that is not one subject token is refused (CheckDomain).
func NewJetStream(nc *nats.Conn, domain string, opts ...natsjs.JetStreamOpt) (natsjs.JetStream, error) {
	if domain == "" {
		return natsjs.New(nc, opts...)
	}
	if err := CheckDomain(domain); err != nil {
		return nil, err
	}
	return natsjs.NewWithDomain(nc, domain, opts...)
}

// CheckDomain refuses a JetStream domain that cannot be a subject token ("" is no domain: fine).
func CheckDomain(domain string) error {
	if strings.ContainsAny(domain, ". \t\r\n*>") {
		return &domainError{domain}
	}
	return nil
}

// domainError is a JetStream domain that cannot be a subject token.
type domainError struct{ domain string }

func (e *domainError) Error() string {
	return "JetStream domain " + `"` + e.domain + `"` + ": a domain is one subject token (no '.', '*', '>' or white space)"
}

// APIPrefix is the subject prefix of js's JetStream API requests, with its trailing dot:
// $JS.API. by default, $JS.<domain>.API. for a context of natsjs.NewWithDomain, or the prefix of
// natsjs.NewWithAPIPrefix. The Store's own requests (batched direct gets, leader gets, purges) go
// under it, as nats.go's do.
func APIPrefix(js natsjs.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return natsjs.DefaultAPIPrefix
}

// Domain is the JetStream domain the Store's requests go to ("" : the account's own JetStream).
func (s *Store) Domain() string {
	if s.js == nil {
		return ""
	}
	return s.js.Options().Domain
}

// api is subject rest under the Store's API prefix (APIPrefix).
func (s *Store) api(rest string) string { return APIPrefix(s.js) + rest }

// likeJS returns a new JetStream context on js's connection with js's domain or API prefix, and
// opts: a context of its own (its async publishes and acks apart) that reaches the same JetStream.
func likeJS(js natsjs.JetStream, opts ...natsjs.JetStreamOpt) (natsjs.JetStream, error) {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return natsjs.NewWithAPIPrefix(js.Conn(), o.APIPrefix, opts...)
	case o.Domain != "":
		return natsjs.NewWithDomain(js.Conn(), o.Domain, opts...)
	}
	return natsjs.New(js.Conn(), opts...)
}

// KVPutSubject is the subject to publish key's entry of KV bucket bucket to through js: the
// bucket's subject (wire.KVSubject), under js's API prefix when js has a domain or a prefix, as
// nats.go's KV puts do ($JS.<domain>.API.$KV.<bucket>.<key>; the domain's server maps it back to
// $KV.<bucket>.<key>). A hand-made KV put (one with headers of its own) goes there.
func KVPutSubject(js natsjs.JetStream, bucket, key string) string {
	if p := APIPrefix(js); p != natsjs.DefaultAPIPrefix {
		return p + wire.KVSubject(bucket, key)
	}
	return wire.KVSubject(bucket, key)
}

// orbitJS is js for orbit.go's jetstreamext direct gets: with a domain, a context of the same
// connection whose API prefix is the domain's. (jetstreamext v0.3.2 builds a domain's subject
// as $JS.<domain>.DIRECT.GET..., without the API token, which nothing serves; its APIPrefix
// case is right.)
func orbitJS(js natsjs.JetStream) (natsjs.JetStream, error) {
	if o := js.Options(); o.APIPrefix == "" && o.Domain != "" {
		return natsjs.NewWithAPIPrefix(js.Conn(), APIPrefix(js), natsjs.WithDefaultTimeout(o.DefaultTimeout))
	}
	return js, nil
}
