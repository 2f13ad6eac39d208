package attack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/netns"
)

// RedirectionIPv4 is the insider redirection towards an IPv4 locator (issue 23 item 6): the
// credit towards a never-verified locator must count what goes on the wire, the 28-byte
// UDP/IPv4 encapsulation of every packet included, so that small packets cannot take the CN
// past 3x what came from the locator.
const RedirectionIPv4 = "redirection-ipv4-credit"

// IPv4 in the attack lab (documentation ranges, only inside the lab's namespaces): the CN on
// its link to R1, the attacker behind R1. The attacker plays the victim's IPv4 endpoint.
var (
	r1CN4  = "198.51.100.1"
	cn4    = netip.MustParseAddr("198.51.100.2")
	r1Atk4 = "203.0.113.1"
	atk4   = netip.MustParseAddr("203.0.113.2")
)

// creditPackets is how many small packets the attacker sends from the announced endpoint to
// earn credit: each is what the CN received from there.
const creditPackets = 50

// ipv4Wiring gives the CN and the attacker IPv4 addresses routed through R1.
func (l *labRun) ipv4Wiring() error {
	t := l.t
	for _, c := range []struct {
		ns   *netns.NS
		args []string
	}{
		{t.R1, []string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}},
		{t.R1, []string{"ip", "addr", "add", r1CN4 + "/24", "dev", "r1-cn"}},
		{t.R1, []string{"ip", "addr", "add", r1Atk4 + "/24", "dev", "r1-atk"}},
		{t.CN, []string{"ip", "addr", "add", cn4.String() + "/24", "dev", lab.IfCN}},
		{t.CN, []string{"ip", "-4", "route", "add", "default", "via", r1CN4}},
		{l.atk, []string{"ip", "addr", "add", atk4.String() + "/24", "dev", "atk-r1"}},
		{l.atk, []string{"ip", "-4", "route", "add", "default", "via", r1Atk4}},
	} {
		if _, err := c.ns.Run(c.args...); err != nil {
			return fmt.Errorf("IPv4 wiring: %w", err)
		}
	}
	return nil
}

// redirectionIPv4: the MN's nonce (an insider) in an LU sent from the attacker's IPv4
// endpoint, announcing that endpoint, then creditPackets small datagrams from it; R1 counts the
// bytes forwarded to and from the endpoint over the next 2 s.
func (l *labRun) redirectionIPv4(ctx context.Context) (Result, error) {
	cn := l.t.CN
	nonce, err := l.mnNonce()
	if err != nil {
		return Result{}, err
	}
	// The victim's endpoint is a bound socket, so that what reaches it draws no ICMP error
	// (which would count as bytes from it).
	var conn *net.UDPConn
	if err := l.atk.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: atk4.AsSlice()})
		return err
	}); err != nil {
		return Result{}, fmt.Errorf("victim endpoint: %w", err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
	ep := netip.AddrPortFrom(atk4, uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	victim, err := encap.L32(ep)
	if err != nil {
		return Result{}, err
	}
	const table = "ilnpattack4"
	if _, err := l.t.R1.Run("nft", "add table ip "+table+"; add chain ip "+table+
		" relay { type filter hook forward priority 0; }; add rule ip "+table+" relay ip daddr "+atk4.String()+
		" counter; add rule ip "+table+" relay ip saddr "+atk4.String()+" counter"); err != nil {
		return Result{}, fmt.Errorf("byte counters on R1: %w", err)
	}
	defer func() { _, _ = l.t.R1.Run("nft", "delete table ip "+table) }()
	stats0, err := l.stats(cn, l.cnSock)
	if err != nil {
		return Result{}, err
	}
	from := wire.ILV{Locator: victim, NID: l.mnAddr.NID}
	to := &net.UDPAddr{IP: cn4.AsSlice(), Port: encap.DefaultPort}
	lu, err := LocatorUpdate(from, l.cnAddr, wire.OpAdvertisement, []wire.L64{victim}, nonce)
	if err != nil {
		return Result{}, err
	}
	if _, err := conn.WriteTo(lu, to); err != nil {
		return Result{}, fmt.Errorf("LU from the IPv4 endpoint: %w", err)
	}
	sent := 1
	time.Sleep(100 * time.Millisecond) // the CN applies the LU before the credit packets
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < creditPackets; i++ {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-tick.C:
		}
		if _, err := conn.WriteTo(UDP(from, l.cnAddr, nonce, 40000, sinkPort, nil), to); err != nil {
			return Result{}, fmt.Errorf("small packet from the IPv4 endpoint: %w", err)
		}
	}
	time.Sleep(2 * time.Second)
	counts, stats, err := l.redirectionCounts("ip", table)
	if err != nil {
		return Result{}, err
	}
	acc := int(stats["lu_applied"] - stats0["lu_applied"])
	survived := l.flow.Err() == nil
	return Result{Attack: RedirectionIPv4, Sent: &sent, Accepted: &acc, FlowSurvived: &survived,
		UnverifiedBytesSent: &counts[0], UnverifiedBytesReceived: &counts[1],
		From: "atk (behind R1) from its IPv4 endpoint, with the MN's real nonce (an insider), then " +
			fmt.Sprint(creditPackets) + " empty datagrams from there",
		Measured: "LUs the CN's ILCC applied (lu_applied)",
		Counters: []string{"R1 bytes forwarded to / from the announced IPv4 endpoint, UDP/IPv4 headers included (not a drop counter)"}}, nil
}

// mnNonce is the MN's nonce as the CN's session holds it: what an insider (the MN itself)
// knows.
func (l *labRun) mnNonce() (wire.Nonce, error) {
	rows, err := l.sessions(l.t.CN, l.cnSock)
	if err != nil {
		return wire.Nonce{}, err
	}
	s, ok := sessionOf(rows, l.mnAddr.NID.String())
	if !ok {
		return wire.Nonce{}, fmt.Errorf("the CN has no session with the MN")
	}
	return nonceFromHex(s.RemoteNonce)
}
