package analysis

import (
	"fmt"
	"math"
)

// Protocol is one of the three mobility schemes compared in chapter 6.
type Protocol int

const (
	MIPv6NoRO Protocol = iota // Mobile IPv6, bidirectional tunnelling through the HA
	MIPv6RO                   // Mobile IPv6 with route optimisation (return routability)
	ILNPv6                    // ILNPv6: LU / LU-ACK straight to the correspondent
)

// Protocols lists the protocols in the column order the thesis uses.
var Protocols = []Protocol{MIPv6NoRO, MIPv6RO, ILNPv6}

func (p Protocol) String() string {
	switch p {
	case MIPv6NoRO:
		return "MIPv6 without RO"
	case MIPv6RO:
		return "MIPv6 with RO"
	case ILNPv6:
		return "ILNPv6"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Slug is a file- and CSV-friendly name.
func (p Protocol) Slug() string {
	switch p {
	case MIPv6NoRO:
		return "mipv6_noro"
	case MIPv6RO:
		return "mipv6_ro"
	case ILNPv6:
		return "ilnpv6"
	}
	return fmt.Sprintf("protocol%d", int(p))
}

// Path holds the probability that a packet crosses each directed hop of the
// Fig. 6.4 topology (CN - R1 - R2(HA) / R3 - MN), as used in eqs. 4-9.
// Hop names read "from-to": R3R1 is R3 towards R1.
type Path struct {
	MNR3, R3MN float64 // MN <-> R3, the MN's access link in the new network
	R3R1, R1R3 float64 // the new link, loss position (2) in Fig. 6.4
	R1HA, HAR1 float64 // the old link to the home agent R2, loss position (1)
	CNR1, R1CN float64 // CN <-> R1
}

// PathFromLoss is the path of §6.2.2: oldLoss on R1-HA and newLoss on R1-R3
// in both directions, every other hop lossless (eq. 10). Losses are
// fractions (0.01 = 1 %); Table 6.1 lists 1-loss for each grid point.
func PathFromLoss(oldLoss, newLoss float64) Path {
	return Path{
		MNR3: 1, R3MN: 1,
		R3R1: 1 - newLoss, R1R3: 1 - newLoss,
		R1HA: 1 - oldLoss, HAR1: 1 - oldLoss,
		CNR1: 1, R1CN: 1,
	}
}

// LossGrid is the set of loss rates of §6.2.2 (1, 2, 5 and 10 %), applied to
// the old and the new link in every combination (Table 6.1).
var LossGrid = []float64{0.01, 0.02, 0.05, 0.10}

// Exchange is one request/response signalling pair; a sender retransmits the
// request until the response arrives, so the pair succeeds or fails as one.
type Exchange struct {
	Request, Response string
	PRequest          float64 // probability the request is delivered
	PResponse         float64 // probability the response is delivered
}

// P is the probability that one attempt of the exchange completes.
func (e Exchange) P() float64 { return e.PRequest * e.PResponse }

// Exchanges returns the signalling pairs a handoff of proto needs, with each
// message's delivery probability over its Fig. 6.5 path.
func (p Path) Exchanges(proto Protocol) []Exchange {
	buHA := p.MNR3 * p.R3R1 * p.R1HA                   // eq. 4
	backHA := p.HAR1 * p.R1R3 * p.R3MN                 // eq. 5
	hoti := p.MNR3 * p.R3R1 * p.R1HA * p.HAR1 * p.R1CN // eq. 6
	hot := p.CNR1 * p.R1HA * p.HAR1 * p.R1R3 * p.R3MN  // eq. 7
	toCN := p.MNR3 * p.R3R1 * p.R1CN                   // eq. 8: CoTI = BU_CN = LU
	fromCN := p.CNR1 * p.R1R3 * p.R3MN                 // eq. 9: CoT = BAck_CN = LU-ACK
	home := Exchange{"BU to HA", "BAck from HA", buHA, backHA}
	switch proto {
	case MIPv6NoRO:
		return []Exchange{home}
	case MIPv6RO:
		return []Exchange{
			home,
			{"HoTI", "HoT", hoti, hot},
			{"CoTI", "CoT", toCN, fromCN},
			{"BU to CN", "BAck from CN", toCN, fromCN},
		}
	case ILNPv6:
		return []Exchange{{"LU", "LU-ACK", toCN, fromCN}}
	}
	return nil
}

// Success is the single-attempt handoff success probability: every
// signalling packet must arrive, independently (eqs. 1-3, hence 17-19).
func (p Path) Success(proto Protocol) float64 {
	return p.SuccessWithRetries(proto, 1)
}

// SuccessWithRetries extends eqs. 1-3 to a sender that tries each exchange up
// to attempts times (a lost request or a lost response both cost one
// attempt). Attempts are independent, so each exchange fails only if all
// attempts fail: P = Π_i (1 - (1 - p_i)^attempts). attempts = 1 is exactly
// eqs. 17-19; attempts < 1 means nothing is sent and the handoff fails.
func (p Path) SuccessWithRetries(proto Protocol, attempts int) float64 {
	if attempts < 1 {
		return 0
	}
	exs := p.Exchanges(proto)
	if exs == nil {
		return 0
	}
	prob := 1.0
	for _, e := range exs {
		prob *= 1 - math.Pow(1-e.P(), float64(attempts))
	}
	return prob
}

// SuccessGrid evaluates proto over LossGrid x LossGrid with the given number
// of attempts: grid[i][j] has old-link loss LossGrid[i] and new-link loss
// LossGrid[j], the row/column layout of Table 6.2.
func SuccessGrid(proto Protocol, attempts int) [][]float64 {
	grid := make([][]float64, len(LossGrid))
	for i, old := range LossGrid {
		grid[i] = make([]float64, len(LossGrid))
		for j, nw := range LossGrid {
			grid[i][j] = PathFromLoss(old, nw).SuccessWithRetries(proto, attempts)
		}
	}
	return grid
}

// Round2 rounds to two decimals, half away from zero: the rounding of every
// Table 6.2 cell except the errata listed in Errata.
func Round2(x float64) float64 { return math.Round(x*100) / 100 }
