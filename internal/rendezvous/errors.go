package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/miekg/dns"
)

// Cause names why a DNS exchange failed. The names appear in logs, counters and timeline
// events.
type Cause string

const (
	CauseOK            Cause = "ok"
	CauseBadKey        Cause = "tsig-badkey"     // server does not know our key name/algorithm
	CauseBadSig        Cause = "tsig-badsig"     // server knows the key, the secret differs
	CauseBadTime       Cause = "tsig-badtime"    // clocks differ by more than the fudge (300 s)
	CauseRefused       Cause = "refused"         // update-policy does not allow this key/name/type
	CauseNotAuth       Cause = "notauth"         // server is not authoritative for the zone
	CauseNotZone       Cause = "notzone"         // the name is not inside the zone
	CauseServFail      Cause = "servfail"        // server-side failure, may be transient
	CauseFormErr       Cause = "formerr"         // server could not parse our message
	CausePrereq        Cause = "prereq-changed"  // RRset changed under us (RFC 2136 s.3.2)
	CauseTimeout       Cause = "timeout"         // no answer in time
	CauseUnreachable   Cause = "unreachable"     // no route, refused port, network down
	CauseMalformed     Cause = "malformed-reply" // answer that does not parse or match
	CauseResponseTSIG  Cause = "reply-tsig"      // answer's own signature does not verify
	CauseOtherRcode    Cause = "rcode"           // any other response code
	CauseLocal         Cause = "local"           // could not build or sign the message
	CauseContextClosed Cause = "canceled"        // the publisher is shutting down
)

// retryable says whether trying again without a configuration change can help.
func (c Cause) retryable() bool {
	switch c {
	case CauseServFail, CauseTimeout, CauseUnreachable, CauseMalformed, CausePrereq, CauseBadTime, CauseResponseTSIG:
		return true
	}
	return false
}

// hint is the part of a log line that tells an operator what to look at.
func (c Cause) hint() string {
	switch c {
	case CauseBadKey:
		return "the server does not know this TSIG key name or algorithm: check the key statement in named.conf"
	case CauseBadSig:
		return "the server rejected the TSIG signature: the key file's secret differs from the server's"
	case CauseBadTime:
		return "the server says our clock is off by more than the TSIG fudge (300 s)"
	case CauseRefused:
		return "the server refused the update: check update-policy/allow-update for this key, name and types NID L64 L32"
	case CauseNotAuth:
		return "the server is not authoritative for the zone (or rejected the TSIG): check zone and server"
	case CauseNotZone:
		return "the name is not inside the configured zone"
	case CauseServFail:
		return "server failure (may be transient)"
	case CauseFormErr:
		return "the server could not parse the update (does it support NID/L64, BIND >= 9.9.3?)"
	case CausePrereq:
		return "the records changed on the server since we read them (stale update rejected)"
	case CauseTimeout:
		return "no answer from the server in time"
	case CauseUnreachable:
		return "server unreachable (no route, nothing listening, or link down)"
	case CauseMalformed:
		return "the server's reply was malformed"
	case CauseResponseTSIG:
		return "the reply's TSIG did not verify (spoofed or corrupted?)"
	}
	return ""
}

// ExchangeError is a failed update or lookup exchange with its classified cause.
type ExchangeError struct {
	Op     string // "update" or "query NID" / "query L64" / "read state"
	Name   string
	Server string
	Cause  Cause
	Rcode  int   // DNS or TSIG error code when the server answered, else -1
	Err    error // underlying error, may be nil
}

func (e *ExchangeError) Error() string {
	s := fmt.Sprintf("DNS %s of %s at %s failed: %s", e.Op, e.Name, e.Server, e.Cause)
	if e.Rcode >= 0 {
		s += " (" + rcodeName(e.Rcode) + ")"
	}
	if h := e.Cause.hint(); h != "" {
		s += ": " + h
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ExchangeError) Unwrap() error { return e.Err }

func rcodeName(rc int) string {
	switch rc {
	case dns.RcodeBadSig:
		return "BADSIG"
	case dns.RcodeBadKey:
		return "BADKEY"
	case dns.RcodeBadTime:
		return "BADTIME"
	}
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

// classifyTransport names a failure of the exchange itself (no usable answer).
func classifyTransport(err error) Cause {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return CauseContextClosed
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return CauseTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL),
		errors.Is(err, syscall.ENETDOWN), errors.Is(err, syscall.EHOSTDOWN):
		return CauseUnreachable
	case errors.Is(err, dns.ErrSig), errors.Is(err, dns.ErrTime), errors.Is(err, dns.ErrNoSig):
		return CauseResponseTSIG
	case errors.Is(err, dns.ErrId), errors.Is(err, dns.ErrShortRead), errors.Is(err, dns.ErrBuf):
		return CauseMalformed
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return CauseUnreachable
	}
	return CauseMalformed
}

// classifyReply names the outcome of an answered exchange: TSIG errors first (the server puts
// them in the reply's TSIG RR with rcode NOTAUTH, RFC 8945 s.5.2), then the rcode.
func classifyReply(r *dns.Msg) (Cause, int) {
	if t := r.IsTsig(); t != nil && t.Error != dns.RcodeSuccess {
		switch t.Error {
		case dns.RcodeBadKey:
			return CauseBadKey, int(t.Error)
		case dns.RcodeBadSig:
			return CauseBadSig, int(t.Error)
		case dns.RcodeBadTime:
			return CauseBadTime, int(t.Error)
		}
		return CauseNotAuth, int(t.Error)
	}
	switch r.Rcode {
	case dns.RcodeSuccess:
		return CauseOK, r.Rcode
	case dns.RcodeRefused:
		return CauseRefused, r.Rcode
	case dns.RcodeNotAuth:
		return CauseNotAuth, r.Rcode
	case dns.RcodeNotZone:
		return CauseNotZone, r.Rcode
	case dns.RcodeServerFailure:
		return CauseServFail, r.Rcode
	case dns.RcodeFormatError:
		return CauseFormErr, r.Rcode
	case dns.RcodeNXRrset, dns.RcodeYXRrset, dns.RcodeYXDomain, dns.RcodeNameError:
		return CausePrereq, r.Rcode
	}
	return CauseOtherRcode, r.Rcode
}
