// Package zone is the pure core of the multicluster plugin: it parses names of the clusterset zone (schema 1.0.0,
// SPEC section 4) and keeps an immutable index of precompiled answers for them.
//
// Each owner name's answers are packed in wire format once per change of its service, owned by a compression
// pointer to the question, so that one answer serves the name in any case and is owned by the name exactly as
// asked. The bytes a port's or an endpoint's name answers are shared with the service name's whenever they are
// the same. The index is rebuilt copy-on-write, one service at a time, and published with an atomic pointer
// swap, so a query reads one snapshot without taking a lock and builds nothing: Answer finds the bytes, and
// Answer.Reply writes a whole reply patching only the header and the question; Result unpacks records for
// callers that need a dns.Msg. The package knows nothing of Kubernetes or CoreDNS: adapters feed it Service
// values and ask it questions.
package zone
