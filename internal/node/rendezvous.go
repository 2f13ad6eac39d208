package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/rendezvous"
	"ilnp/internal/reresolve"
	"ilnp/internal/resolver"
)

// DNS rendezvous (issue 6, RFC 6742): the node publishes its NID and its valid locators under
// its name with RFC 2136 updates, so that a correspondent can find it after a move and open a
// new session to it; and the stub resolver finds other nodes' NID/L64 records.
//
// What is published is exactly what a Locator Update would advertise now
// (ilcc.Cache.Advertisement): the active and valid locators, preference = rank (0 = the active
// one). Publishing happens on the loop after every change of the local locator set, but only
// hands the new set to the Publisher, which never blocks: the Locator Updates to
// correspondents (sent right after, in apply) never wait for DNS. The Publisher's own
// goroutine sends one atomic update (adds before deletes, compare-and-swap prerequisites,
// newest state wins) and retries with backoff while the server is unreachable.
//
// On shutdown the records are left as they are, on purpose: a node that restarts (upgrade,
// crash, reboot) usually comes back on the same locators, and deleting its records would make
// it unreachable by name in between, and for the negative-caching time after. A locator that
// is really gone is replaced by the next update once the node runs again.

// rendezvousState is the node's DNS side: the publisher (nil when not publishing) and the
// stub resolver (for its counters; nil while not listening).
type rendezvousState struct {
	pub  *rendezvous.Publisher
	last []rendezvous.LocatorEntry // loop-owned: the set last handed to Publish
	stub atomic.Pointer[resolver.Server]

	// Re-resolution of correspondents whose LUs go unanswered (reresolve.go): set in Run
	// before the loop starts, then loop-owned.
	ctx    context.Context
	wg     *sync.WaitGroup
	finder *rendezvous.Finder
	plan   *reresolve.Planner
}

// startPublisher creates the publisher when dns-publish-name is set and runs it until ctx
// ends. It runs before the control socket serves (n.rdv and n.rdv.pub are then only read). A key file that cannot be read is a start-up error: publishing unsigned instead would
// only be refused by the server.
func (n *Node) startPublisher(ctx context.Context, wg *sync.WaitGroup) error {
	n.rdv = &rendezvousState{ctx: ctx, wg: wg}
	if n.cfg.DNSPublishName == "" {
		return nil
	}
	var key *rendezvous.TSIGKey
	if n.cfg.DNSPublishKeyFile != "" {
		k, err := rendezvous.LoadTSIGKey(n.cfg.DNSPublishKeyFile, n.cfg.DNSPublishKeyName)
		if err != nil {
			return fmt.Errorf("dns-publish-key: %w", err)
		}
		key = &k
	}
	pub, err := rendezvous.NewPublisher(rendezvous.PublisherConfig{
		Name:   n.cfg.DNSPublishName + ".",
		Zone:   n.cfg.DNSPublishZone + ".",
		Server: n.cfg.DNSPublishServer.String(),
		Key:    key,
		TTL:    n.cfg.DNSPublishTTL,
		Logger: n.log,
		Node:   n.cfg.Node,
		Emit:   n.emit,
	})
	if err != nil {
		return err
	}
	n.rdv.pub = pub
	wg.Add(1)
	go func() {
		defer wg.Done()
		pub.Run(ctx)
	}()
	n.log.Info("publishing NID/L64 records", "name", n.cfg.DNSPublishName, "zone", n.cfg.DNSPublishZone,
		"server", n.cfg.DNSPublishServer, "signed", key != nil, "ttl", n.cfg.DNSPublishTTL, "l32", n.publishesL32())
	return nil
}

// publishLocators hands the current valid locator set to the publisher when it changed. Runs
// on the loop (from syncLocals); it never blocks.
func (n *Node) publishLocators() {
	if n.rdv == nil || n.rdv.pub == nil {
		return
	}
	var locs []rendezvous.LocatorEntry
	for _, e := range n.cache.Advertisement(time.Now()) {
		// IPv4 locators become L32 records (xfamily.go, publishableL32).
		if encap.IsL32(e.Locator) && !n.publishableL32(e.Locator) {
			continue
		}
		locs = append(locs, rendezvous.LocatorEntry{Locator: e.Locator, Preference: e.Preference})
	}
	// An empty set is not published by the Publisher: it keeps the last records, the best
	// hint a correspondent can get while the node has no locator.
	if slices.Equal(locs, n.rdv.last) {
		return
	}
	n.rdv.last = locs
	if err := n.rdv.pub.Publish(context.Background(), n.nid, locs); err != nil {
		n.log.Warn("DNS publish", "err", err)
	}
}

// addPublisherStats adds the DNS counters to a `show stats` map. The stub resolver's:
// dns_queries, dns_ilnp_answers, dns_forwarded, dns_failed, dns_ilnp_lookup_failures (NID/L64
// lookups that failed and fell back to plain IPv6). The publisher's: dns_updates_ok,
// dns_update_errors (and dns_update_errors_CAUSE per cause), dns_updates_sent, dns_publishes,
// dns_state_reads, dns_superseded. Safe from any goroutine.
func (n *Node) addPublisherStats(stats map[string]uint64) {
	if n.rdv == nil {
		return
	}
	if stub := n.rdv.stub.Load(); stub != nil {
		st := stub.Stats()
		stats["dns_queries"] = st.Queries
		stats["dns_ilnp_answers"] = st.ILNP
		stats["dns_forwarded"] = st.Forwarded
		stats["dns_failed"] = st.Failed
		stats["dns_ilnp_lookup_failures"] = st.LookupFailed
	}
	if n.rdv.pub == nil {
		return
	}
	st := n.rdv.pub.Status().Stats
	var errs uint64
	for cause, v := range st.Errors {
		stats["dns_update_errors_"+string(cause)] = v
		errs += v
	}
	stats["dns_update_errors"] = errs
	stats["dns_publishes"] = st.Publishes
	stats["dns_updates_sent"] = st.UpdatesSent
	stats["dns_updates_ok"] = st.UpdatesOK
	stats["dns_state_reads"] = st.StateReads
	stats["dns_superseded"] = st.Superseded
}

// ilnpSource is the stub resolver's view of ILNP names: the hosts file first (an operator's
// explicit entry wins), then NID/L64 records in DNS (asked from dns-lookup-server, by default
// dns-upstream). Nil when neither is configured.
func (n *Node) ilnpSource() (resolver.Source, error) {
	var hosts resolver.Source
	if n.cfg.HostsFile != "" {
		h, err := resolver.LoadHostsFile(n.cfg.HostsFile)
		if err != nil {
			return nil, err
		}
		hosts, n.hosts = h, h
	}
	server := n.cfg.DNSLookupServer
	if !server.IsValid() {
		server = n.cfg.DNSUpstream
	}
	var dnsSource resolver.Source
	if server.IsValid() {
		f, err := rendezvous.NewFinder(rendezvous.FinderConfig{Server: server.String()})
		if err != nil {
			return nil, fmt.Errorf("NID/L64 lookups: %w", err)
		}
		dnsSource = resolver.DNSSource(f)
		n.enableReresolve(f)
		n.log.Info("stub resolver looks up NID/L64 records", "server", server)
	}
	if hosts == nil && dnsSource == nil {
		return nil, nil
	}
	return resolver.Chain(hosts, dnsSource), nil
}
