// Package rendezvous makes ILNPv6 nodes findable through real DNS (RFC 6742 NID and L64
// records). The thesis left this as future work (s.7.2.1): a mobile node keeps its own records
// current with Secure Dynamic Update (RFC 2136 signed with TSIG, RFC 3007/8945) and publishes
// them with very low TTLs (s.2.6.3).
//
// Mobile node side (ilnpd):
//
//	key, err := rendezvous.LoadTSIGKey("/etc/ilnp/mn.key", "")
//	pub, err := rendezvous.NewPublisher(rendezvous.PublisherConfig{
//		Name: "mn.ilnp.test.", Zone: "ilnp.test.", Server: "[2001:db8:53::1]:53",
//		Key: &key, TTL: 0, Logger: log, Emit: timelineWriter.Emit, Node: "mn"})
//	go pub.Run(ctx)
//	// on start and on every change of the valid local locator set:
//	pub.Publish(ctx, nid, []rendezvous.LocatorEntry{{Locator: l64, Preference: 10}, ...})
//
// Publish never blocks (the Locator Update path must not wait for DNS); Run sends the newest
// state and retries with backoff while the server is unreachable.
//
// Correspondent side (ilnpd's stub resolver): a Finder is a resolver.Source.
//
//	f, err := rendezvous.NewFinder(rendezvous.FinderConfig{Server: "[2001:db8:53::1]:53"})
//	ilvs, err := f.LookupILNP(ctx, "mn.ilnp.test") // nil, nil: not ILNP, pass AAAA through
//
// A node whose locators are its network's (a host in a mobile network) has LP records instead
// of, or beside, L64 records: the Finder follows each LP one level to its target's L64 records.
package rendezvous
