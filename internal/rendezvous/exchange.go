package rendezvous

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/miekg/dns"
)

// DialFunc opens a connection to a DNS server; net.Dialer.DialContext by default. Tests (and
// a daemon serving one namespace from another) replace it to open sockets in a chosen
// network namespace.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// exchanger sends one DNS message and returns the reply to it, over UDP and, when the reply is
// truncated, again over TCP (RFC 1035 s.4.2.1).
type exchanger struct {
	server  string
	dial    DialFunc
	timeout time.Duration
	key     *TSIGKey
}

// exchange returns the reply (possibly with err set when the reply's own TSIG did not verify)
// or a transport error with a nil reply.
func (x *exchanger) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	r, err := x.once(ctx, "udp", m)
	if err == nil && r.Truncated {
		r, err = x.once(ctx, "tcp", m)
	}
	return r, err
}

func (x *exchanger) once(ctx context.Context, network string, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	conn, err := x.dial(ctx, network, x.server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The miekg client obeys only the context's deadline; closing the socket makes a
	// cancellation end a pending read too.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	msg := m.Copy()
	c := &dns.Client{Net: network, Timeout: x.timeout, UDPSize: dns.DefaultMsgSize}
	if x.key != nil {
		c.TsigSecret = map[string]string{x.key.Name: x.key.Secret}
		msg.SetTsig(x.key.Name, x.key.Algorithm, 300, time.Now().Unix())
	}
	r, _, err := c.ExchangeWithConnContext(ctx, msg, &dns.Conn{Conn: conn, UDPSize: dns.DefaultMsgSize})
	if r != nil && r.Id != msg.Id {
		r = nil // a late reply to some earlier message, not ours
	}
	if err != nil && r == nil {
		if ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, context.Canceled
			}
			return nil, context.DeadlineExceeded
		}
		return nil, err
	}
	return r, err
}
