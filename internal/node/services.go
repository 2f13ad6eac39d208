package node

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"ilnp/internal/control"
	"ilnp/internal/resolver"
	"ilnp/internal/wire"
)

// peerRegistrationTimeout bounds how long a DNS answer waits for the loop to register the peer.
const peerRegistrationTimeout = 2 * time.Second

// startServices starts the control socket and, when configured, the DNS publisher and the stub
// resolver (ILNP names from the hosts file, then from DNS NID/L64 records).
func (n *Node) startServices(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) error {
	if err := n.startPublisher(ctx, wg); err != nil {
		return err
	}
	ln, err := control.Listen(filepath.Join(n.cfg.StateDir, "ctl.sock"))
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := control.ServeWithLogger(ctx, ln, n, n.log); err != nil {
			errc <- fmt.Errorf("control socket: %w", err)
		}
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		n.runPaths(ctx) // path liveness (paths.go)
	}()

	if !n.cfg.DNSListen.IsValid() {
		return nil
	}
	source, err := n.ilnpSource()
	if err != nil {
		return err
	}
	srv, err := resolver.Listen(resolver.Options{
		Addr:     n.cfg.DNSListen,
		Upstream: n.cfg.DNSUpstream,
		Source:   source,
		Logger:   n.log,
		// A new connection to a correspondent we already have a session with joins that
		// session (its view), so the datapath carries it with the session's nonces.
		SessionView: func(nid wire.NID) (netip.Addr, bool) {
			b, ok := n.cache.Binding(nid)
			if !ok {
				return netip.Addr{}, false
			}
			return b.SessionRemote.Addr(), true
		},
		OnILNPPeer: func(name string, ilvs []wire.RankedILV) {
			ctx, cancel := context.WithTimeout(ctx, peerRegistrationTimeout)
			defer cancel()
			if err := n.RegisterPeer(ctx, name, ilvs); err != nil {
				n.log.Warn("peer not registered", "name", name, "err", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("stub resolver: %w", err)
	}
	n.rdv.stub.Store(srv)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx); err != nil {
			errc <- fmt.Errorf("stub resolver: %w", err)
		}
	}()
	n.log.Info("stub resolver listening", "addr", srv.Addr())
	return nil
}
