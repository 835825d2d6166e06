// Package zone is the pure core of the multicluster plugin: it parses names of the clusterset zone (schema 1.0.0,
// SPEC section 4) and keeps an immutable index of precomputed answers for them.
//
// The index is rebuilt copy-on-write, one service at a time, and published with an atomic pointer swap, so a
// query reads one snapshot without taking a lock and, for names that exist, without building any record; only a
// question in mixed case gets copies of the records, owned by its name as asked. The package knows nothing of
// Kubernetes or CoreDNS: adapters feed it Service values and ask it Lookup questions.
package zone
