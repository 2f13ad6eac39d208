package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/config"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The fake daemon stands in for ilnpd to test the lab's side of the contract: it reads the
// lab's config with the product's parser, opens the control socket, answers AAAA from the
// hosts file on dns-listen, and on the MN writes lu_sent / lu_ack_received when an L3 address
// appears. It has no datapath, so the flow itself is plain IPv6.
const fakeEnv = "ILNP_LAB_FAKE_ILNPD"

func fakeILNPd() {
	if os.Getenv(fakeEnv) == "" {
		return
	}
	if len(os.Args) != 3 || os.Args[1] != "-config" {
		fmt.Fprintln(os.Stderr, "usage: ilnpd -config FILE")
		os.Exit(2)
	}
	if err := fakeRun(os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "fake ilnpd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func fakeRun(path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	hf, err := os.Open(cfg.HostsFile)
	if err != nil {
		return err
	}
	hosts, err := wire.ParseHosts(hf, cfg.HostsFile)
	hf.Close()
	if err != nil {
		return err
	}
	evf, err := os.Create(cfg.EventsFile)
	if err != nil {
		return err
	}
	events := timeline.NewWriter(evf)
	ctl, err := net.Listen("unix", cfg.ControlSocket())
	if err != nil {
		return err
	}
	defer ctl.Close()
	dns.HandleFunc(".", func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(q.Question[0].Name, ".")
		if q.Question[0].Qtype == dns.TypeAAAA {
			for _, ilv := range hosts.Lookup(name) {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 0}, AAAA: ilv.Addr().AsSlice()})
			}
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{Addr: cfg.DNSListen.String(), Net: "udp"}
	go func() { _ = srv.ListenAndServe() }()
	defer srv.Shutdown()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if cfg.Node != "mn" {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
		ifi, err := net.InterfaceByName(IfMNR3)
		if err != nil {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if strings.HasPrefix(a.String(), "2001:db8:3:") {
				events.Emit(timeline.Event{Kind: timeline.LUSent, Node: "mn", Attempt: 1, Locator: L64(L3)})
				time.Sleep(3 * time.Millisecond)
				events.Emit(timeline.Event{Kind: timeline.LUAckReceived, Node: "mn"})
				<-ctx.Done()
				return nil
			}
		}
	}
}

// The ILNP mode's plumbing against the fake daemon: config accepted by the product's parser,
// resolv.conf pointing iperf3 at the stub resolver (the flow runs by name), the timeline read
// for the handoff delay, /etc/netns cleaned.
func TestE2EILNPModePlumbing(t *testing.T) {
	requireLab(t)
	bin := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexport %s=1\nexec %s \"$@\"\n", fakeEnv, exe)
	if err := os.WriteFile(bin+"/ilnpd", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin+"/ilnpctl", []byte("#!/bin/sh\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runLab(t, "lan-lan", "ilnp-soft", "udp-voip", bin)
	if r.UDPSent == nil || *r.UDPSent < 100 {
		t.Errorf("the flow did not run by name through the resolver: %s", describe(r))
	}
	if r.HandoffDelayMs == nil || *r.HandoffDelayMs < 2.9 || *r.HandoffDelayMs > 250 || r.LUSent == nil || *r.LUSent != 1 {
		t.Errorf("handoff from the fake timeline: %s", describe(r))
	}
}
