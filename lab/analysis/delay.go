package analysis

import (
	"fmt"
	"time"
)

// Scenario is one of the four handoff scenarios of §6.3.3 (as in ch. 4-5).
type Scenario int

const (
	LANtoLAN Scenario = iota
	LANtoWAN
	WANtoLAN
	WANtoWAN
)

// Scenarios lists the scenarios in the order of Tables 6.5-6.12.
var Scenarios = []Scenario{LANtoLAN, LANtoWAN, WANtoLAN, WANtoWAN}

func (s Scenario) String() string {
	switch s {
	case LANtoLAN:
		return "lan-lan"
	case LANtoWAN:
		return "lan-wan"
	case WANtoLAN:
		return "wan-lan"
	case WANtoWAN:
		return "wan-wan"
	}
	return fmt.Sprintf("Scenario(%d)", int(s))
}

// Title is the wording of the thesis's table captions.
func (s Scenario) Title() string {
	switch s {
	case LANtoLAN:
		return "LAN to LAN"
	case LANtoWAN:
		return "LAN to WAN"
	case WANtoLAN:
		return "WAN to LAN"
	case WANtoWAN:
		return "WAN to WAN"
	}
	return s.String()
}

// LossCase is a row of Tables 6.3-6.12: which single signalling packet is lost.
type LossCase int

const (
	NoLoss     LossCase = iota // eqs. 20-26
	UpdateLost                 // the BU to the HA or the LU is lost: eqs. 27-28, 31-32, 37-38
	AckLost                    // the BAck from the HA or the LU-ACK is lost: eqs. 29-30, 33-34, 39-40
	ROLost                     // one of HoTI/HoT, CoTI/CoT, BU/BAck to the CN: eqs. 35-36
)

// LossCases lists the rows in table order.
var LossCases = []LossCase{NoLoss, UpdateLost, AckLost, ROLost}

func (c LossCase) String() string {
	switch c {
	case NoLoss:
		return "No loss"
	case UpdateLost:
		return "LU or BU loss"
	case AckLost:
		return "LU-Ack or BAck loss"
	case ROLost:
		return "Any of RO+ packets loss"
	}
	return fmt.Sprintf("LossCase(%d)", int(c))
}

// Slug is a CSV-friendly name.
func (c LossCase) Slug() string {
	switch c {
	case NoLoss:
		return "no_loss"
	case UpdateLost:
		return "update_lost"
	case AckLost:
		return "ack_lost"
	case ROLost:
		return "ro_lost"
	}
	return fmt.Sprintf("case%d", int(c))
}

// Column is a column of Tables 6.3-6.12.
type Column int

const (
	ColMIPNoRO Column = iota
	ColMIPRO
	ColILNPHard
	ColILNPSoft
)

// Columns lists the columns in table order.
var Columns = []Column{ColMIPNoRO, ColMIPRO, ColILNPHard, ColILNPSoft}

func (c Column) String() string {
	switch c {
	case ColMIPNoRO:
		return "MIP no RO"
	case ColMIPRO:
		return "MIP with RO"
	case ColILNPHard:
		return "ILNP hard"
	case ColILNPSoft:
		return "ILNP soft"
	}
	return fmt.Sprintf("Column(%d)", int(c))
}

// Slug is a CSV-friendly name.
func (c Column) Slug() string {
	switch c {
	case ColMIPNoRO:
		return "mip_noro"
	case ColMIPRO:
		return "mip_ro"
	case ColILNPHard:
		return "ilnp_hard"
	case ColILNPSoft:
		return "ilnp_soft"
	}
	return fmt.Sprintf("col%d", int(c))
}

// Inputs are the variables of the expressions in Tables 6.3 and 6.4.
type Inputs struct {
	RTTMNHA, RTTMNCN, RTTHACN time.Duration
	THA                       time.Duration // BU processing at the HA
	TCN, THoT, TCoT           time.Duration // BU/LU, HoT and CoT processing at the CN
	DeltaM                    time.Duration // BU retransmission timer (RFC 6275 s. 11.8)
	DeltaM1                   time.Duration // RO message retransmission timer
	DeltaI                    time.Duration // LU retransmission timer
}

// ThesisInputs are the values of §6.3.3: T_HA ≈ 1 s, T_CN ≈ T_HoT ≈ T_CoT ≈
// 2 ms, Δ_M = 1.5 s, Δ_M1 = 1 s, Δ_I = 1 s and the RTTs of each scenario.
func ThesisInputs(s Scenario) Inputs {
	in := Inputs{
		THA:     time.Second,
		TCN:     2 * time.Millisecond,
		THoT:    2 * time.Millisecond,
		TCoT:    2 * time.Millisecond,
		DeltaM:  1500 * time.Millisecond,
		DeltaM1: time.Second,
		DeltaI:  time.Second,
	}
	const lan, wan, wan2 = 5 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond
	switch s {
	case LANtoLAN:
		in.RTTMNHA, in.RTTMNCN, in.RTTHACN = lan, lan, lan
	case LANtoWAN:
		in.RTTMNHA, in.RTTMNCN, in.RTTHACN = wan, wan, lan
	case WANtoLAN:
		in.RTTMNHA, in.RTTMNCN, in.RTTHACN = wan, lan, wan
	case WANtoWAN:
		in.RTTMNHA, in.RTTMNCN, in.RTTHACN = wan2, wan, wan
	}
	return in
}

// returnRoutability is max[(RTT_MN-HA + RTT_HA-CN + T_HoT), (RTT_MN-CN + T_CoT)]:
// the home and care-of tests run in parallel (eq. 22).
func (in Inputs) returnRoutability() time.Duration {
	return max(in.RTTMNHA+in.RTTHACN+in.THoT, in.RTTMNCN+in.TCoT)
}

// HandoffDelay is the Table 6.3 expression for column col and row c. ok is
// false where the thesis prints N/A (RO packets do not exist without RO).
func (in Inputs) HandoffDelay(col Column, c LossCase) (d time.Duration, ok bool) {
	switch col {
	case ColMIPNoRO:
		base := in.RTTMNHA + in.THA // eq. 20
		switch c {
		case NoLoss:
			return base, true
		case UpdateLost, AckLost: // eqs. 27, 29
			return base + in.DeltaM, true
		}
	case ColMIPRO:
		base := in.RTTMNHA + in.THA + in.RTTMNCN + in.TCN + in.returnRoutability() // eq. 22
		switch c {
		case NoLoss:
			return base, true
		case UpdateLost, AckLost: // eqs. 31, 33
			return base + in.DeltaM, true
		case ROLost: // eq. 35, the upper bound: Δ_M1 may overlap T_HoT/T_CoT
			return base + in.DeltaM1, true
		}
	case ColILNPHard, ColILNPSoft:
		base := in.RTTMNCN + in.TCN // eq. 24
		switch c {
		case NoLoss:
			return base, true
		case UpdateLost, AckLost: // eqs. 37, 39
			return base + in.DeltaI, true
		}
	}
	return 0, false
}

// Interruption is the Table 6.4 expression (symmetric paths, so one-way
// delay is RTT/2). For soft handoff it is 0 if the MN stays in the overlap
// area (eq. 26).
func (in Inputs) Interruption(col Column, c LossCase) (d time.Duration, ok bool) {
	switch col {
	case ColMIPNoRO, ColMIPRO:
		base := in.RTTMNHA/2 + in.THA // eqs. 21, 23
		switch c {
		case NoLoss, AckLost: // eqs. 30, 34: the HA already has the binding
			return base, true
		case UpdateLost: // eqs. 28, 32
			return base + in.DeltaM, true
		case ROLost: // eq. 36: traffic keeps flowing through the HA
			if col == ColMIPRO {
				return base, true
			}
		}
	case ColILNPHard:
		base := in.RTTMNCN/2 + in.TCN // eq. 25
		switch c {
		case NoLoss, AckLost: // eq. 40: the CN already has the new locator
			return base, true
		case UpdateLost: // eq. 38
			return base + in.DeltaI, true
		}
	case ColILNPSoft:
		if c != ROLost {
			return 0, true // eq. 26
		}
	}
	return 0, false
}

// Cell is one entry of Tables 6.5-6.12; OK is false for N/A.
type Cell struct {
	D  time.Duration
	OK bool
}

// DelayTable returns [LossCases][Columns] of HandoffDelay (Tables 6.5, 6.7,
// 6.9, 6.11 with ThesisInputs).
func (in Inputs) DelayTable() [][]Cell {
	return in.table(in.HandoffDelay)
}

// InterruptionTable returns [LossCases][Columns] of Interruption (Tables 6.6,
// 6.8, 6.10, 6.12 with ThesisInputs).
func (in Inputs) InterruptionTable() [][]Cell {
	return in.table(in.Interruption)
}

func (in Inputs) table(f func(Column, LossCase) (time.Duration, bool)) [][]Cell {
	t := make([][]Cell, len(LossCases))
	for i, c := range LossCases {
		t[i] = make([]Cell, len(Columns))
		for j, col := range Columns {
			d, ok := f(col, c)
			t[i][j] = Cell{d, ok}
		}
	}
	return t
}

// Ms formats a duration in milliseconds the way Tables 6.5-6.12 print it:
// no trailing zeros ("7", "1002.5").
func Ms(d time.Duration) string {
	return fmt.Sprintf("%g", float64(d)/float64(time.Millisecond))
}
