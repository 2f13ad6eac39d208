package analysis

import (
	"math"
	"time"
)

// RTOPolicy is an adaptive retransmission timer for the LU sender, after
// RFC 6298: with one RTT sample R, SRTT = R and RTTVAR = R/2 (s. 2.2), so
// RTO = SRTT + max(G, K·RTTVAR) = R + max(G, 2R), clamped to [Min, Max]
// (s. 2.4-2.5), doubled after every timeout (s. 5.5). The thesis instead
// uses a fixed Δ_I = 1 s (§6.3.3).
type RTOPolicy struct {
	Initial     time.Duration // RTO with no RTT sample (RFC 6298 s. 2.1: 1 s)
	Min, Max    time.Duration // clamp; TCP's 1 s floor would undo the point of adapting
	K           float64       // RTTVAR multiplier, 4 in RFC 6298
	G           time.Duration // clock granularity
	Backoff     float64       // multiplier per timeout, 2 in RFC 6298
	MaxAttempts int           // transmissions of one LU, including the first
}

// DefaultRTOPolicy is the policy assumed for our LU engine when the lab does
// not supply its real one: RFC 6298 constants with a 10 ms floor (well above
// the ~2 ms CN processing time of §6.3.3), a 60 s cap (RFC 6298 s. 2.5 allows
// no lower) and 7 transmissions, as ilnp-public-1 (1 s x 7).
func DefaultRTOPolicy() RTOPolicy {
	return RTOPolicy{
		Initial:     time.Second,
		Min:         10 * time.Millisecond,
		Max:         60 * time.Second,
		K:           4,
		G:           time.Millisecond,
		Backoff:     2,
		MaxAttempts: 7,
	}
}

// RTO is the first retransmission timeout given the RTT estimate for the
// correspondent; estimate <= 0 means no sample yet.
func (p RTOPolicy) RTO(estimate time.Duration) time.Duration {
	if estimate <= 0 {
		return p.clamp(p.Initial)
	}
	rttvar := float64(estimate) / 2
	return p.clamp(estimate + max(p.G, time.Duration(p.K*rttvar)))
}

func (p RTOPolicy) clamp(d time.Duration) time.Duration {
	if p.Min > 0 && d < p.Min {
		d = p.Min
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Schedule lists the waits before each retransmission: MaxAttempts-1
// timeouts, the first RTO(estimate), each later one Backoff times the
// previous, capped at Max.
func (p RTOPolicy) Schedule(estimate time.Duration) []time.Duration {
	if p.MaxAttempts < 2 {
		return nil
	}
	waits := make([]time.Duration, p.MaxAttempts-1)
	rto := p.RTO(estimate)
	backoff := max(p.Backoff, 1)
	for i := range waits {
		waits[i] = rto
		rto = p.clamp(time.Duration(math.Min(float64(rto)*backoff, math.MaxInt64/2)))
	}
	return waits
}

// FixedSchedule is the thesis's timer: the same delta before every
// retransmission, attempts transmissions in all.
func FixedSchedule(delta time.Duration, attempts int) []time.Duration {
	if attempts < 2 {
		return nil
	}
	waits := make([]time.Duration, attempts-1)
	for i := range waits {
		waits[i] = delta
	}
	return waits
}

// WithAdaptiveLU returns in with Δ_I replaced by the policy's first timeout
// for the given RTT estimate, so HandoffDelay and Interruption give the
// single-loss rows of Tables 6.3/6.4 under the adaptive timer.
func (in Inputs) WithAdaptiveLU(p RTOPolicy, estimate time.Duration) Inputs {
	in.DeltaI = p.RTO(estimate)
	return in
}

// OldPathRTTMNCN is the MN-CN RTT before the handoff, the only sample an
// LU sender can have when it sends the first LU. The thesis gives RTTs
// only after the handoff; by the same figures we assume 5 ms when the MN
// leaves a LAN and 200 ms when it leaves a WAN.
func OldPathRTTMNCN(s Scenario) time.Duration {
	switch s {
	case LANtoLAN, LANtoWAN:
		return 5 * time.Millisecond
	default:
		return 200 * time.Millisecond
	}
}

// RetryOutcome summarises an exchange retransmitted on a schedule when each
// attempt independently completes with probability p.
type RetryOutcome struct {
	PSuccess  float64       // probability that some attempt completes
	MeanDelay time.Duration // expected handoff delay given success
	MaxDelay  time.Duration // delay if only the last attempt completes
}

// Retry evaluates the exchange: if attempt k (0-based) is the first to
// complete, the handoff delay is the sum of the first k waits plus base
// (RTT + processing). The first completing attempt in sending order always
// answers first because every attempt sees the same path, so this holds
// even when a wait is shorter than the RTT.
func Retry(p float64, waits []time.Duration, base time.Duration) RetryOutcome {
	var out RetryOutcome
	var mean float64
	fail := 1.0 // probability that attempts 0..k-1 all failed
	elapsed := time.Duration(0)
	for k := 0; k <= len(waits); k++ {
		if k > 0 {
			elapsed += waits[k-1]
		}
		pk := fail * p
		out.PSuccess += pk
		mean += pk * float64(elapsed+base)
		fail *= 1 - p
	}
	out.MaxDelay = elapsed + base
	if out.PSuccess > 0 {
		out.MeanDelay = time.Duration(mean / out.PSuccess)
	}
	return out
}
