// Package linkemu is the lab's link emulator. The kernel here has no netem, so a user-space
// forwarder bridges two veth ends in a "wire" namespace over AF_PACKET sockets and applies, per
// direction, a rate limit (serialisation at a fixed bit rate with a bounded queue), random loss,
// and a fixed delay plus normally distributed jitter. Packets keep their order unless Reorder
// is set, as on a real wire.
package linkemu

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Shape is what one direction of a link does to packets.
type Shape struct {
	Delay      time.Duration // fixed one-way delay
	Jitter     time.Duration // standard deviation of a normal variation added to Delay
	Loss       float64       // probability in [0,1] that a packet is dropped
	RateBps    float64       // serialisation rate in bit/s of Ethernet frames; 0: unlimited
	QueueBytes int           // bound on bytes waiting for serialisation; 0: DefaultQueueBytes
	Reorder    bool          // let jitter reorder packets (netem's behaviour); off: FIFO
}

// DefaultQueueBytes bounds the rate queue when a Shape does not say: 512 KB, more than the
// thesis's 320 KB TCP window, so TCP is window-limited rather than queue-limited.
const DefaultQueueBytes = 512 * 1024

// Profiles are the link kinds of the thesis testbed (ch. 3.3 Table 3.5, 4.3, 5.2).
var Profiles = map[string]Shape{
	// Wired LAN: nothing added.
	"lan": {},
	// WAN access (thesis 4.3): +100 ms each way between R1 and R2/R3.
	"wan": {Delay: 100 * time.Millisecond},
	// 802.11ac WLAN access link: the thesis observed ~30 Mbit/s at the MN.
	"wlan": {RateBps: 30e6},
	// Table 3.5 WiFi (St Andrews): 0.26 % loss, one-way delay 33 +/- 26 ms.
	"wifi": {Delay: 33 * time.Millisecond, Jitter: 26 * time.Millisecond, Loss: 0.0026},
	// Table 3.5 3G (UK provider): 10.1 % loss, one-way delay 112 +/- 50 ms.
	"3g": {Delay: 112 * time.Millisecond, Jitter: 50 * time.Millisecond, Loss: 0.101},
}

// ProfileNames lists Profiles in a stable order for help texts.
var ProfileNames = []string{"lan", "wan", "wlan", "wifi", "3g"}

// ParseShape reads a profile name optionally followed by overrides, or overrides alone:
// "wan", "wan+loss=0.01", "delay=100ms+jitter=5ms+loss=0.1+rate=30M+queue=65536+reorder".
// Rates take K/M/G suffixes (bit/s); loss is a fraction (0.101) or a percentage ("10.1%").
func ParseShape(spec string) (Shape, error) {
	var s Shape
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return s, fmt.Errorf("empty link shape")
	}
	for i, part := range strings.Split(spec, "+") {
		key, value, hasValue := strings.Cut(part, "=")
		if !hasValue {
			if key == "reorder" {
				s.Reorder = true
				continue
			}
			p, ok := Profiles[key]
			if !ok || i != 0 {
				return s, fmt.Errorf("link shape %q: %q is not a profile (%s) or key=value", spec, part, strings.Join(ProfileNames, ", "))
			}
			s = p
			continue
		}
		var err error
		switch key {
		case "delay":
			s.Delay, err = parseNonNegDuration(value)
		case "jitter":
			s.Jitter, err = parseNonNegDuration(value)
		case "loss":
			s.Loss, err = parseLoss(value)
		case "rate":
			s.RateBps, err = parseRate(value)
		case "queue":
			s.QueueBytes, err = strconv.Atoi(value)
			if err == nil && s.QueueBytes <= 0 {
				err = fmt.Errorf("must be positive")
			}
		default:
			err = fmt.Errorf("unknown key (delay, jitter, loss, rate, queue, reorder)")
		}
		if err != nil {
			return s, fmt.Errorf("link shape %q: %s=%q: %w", spec, key, value, err)
		}
	}
	return s, nil
}

func parseNonNegDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 || d > time.Hour {
		return 0, fmt.Errorf("out of range [0, 1h]")
	}
	return d, nil
}

func parseLoss(v string) (float64, error) {
	scale := 1.0
	if strings.HasSuffix(v, "%") {
		v, scale = strings.TrimSuffix(v, "%"), 0.01
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	f *= scale
	if !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("out of range [0, 1]")
	}
	return f, nil
}

func parseRate(v string) (float64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(v, "G"), strings.HasSuffix(v, "g"):
		mult, v = 1e9, v[:len(v)-1]
	case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"):
		mult, v = 1e6, v[:len(v)-1]
	case strings.HasSuffix(v, "K"), strings.HasSuffix(v, "k"):
		mult, v = 1e3, v[:len(v)-1]
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	f *= mult
	if !(f >= 0 && f <= 1e12) {
		return 0, fmt.Errorf("out of range [0, 1T]")
	}
	return f, nil
}

// String is the inverse of ParseShape (without a profile name).
func (s Shape) String() string {
	var parts []string
	if s.Delay > 0 {
		parts = append(parts, "delay="+s.Delay.String())
	}
	if s.Jitter > 0 {
		parts = append(parts, "jitter="+s.Jitter.String())
	}
	if s.Loss > 0 {
		parts = append(parts, "loss="+strconv.FormatFloat(s.Loss, 'g', -1, 64))
	}
	if s.RateBps > 0 {
		parts = append(parts, "rate="+strconv.FormatFloat(s.RateBps, 'f', -1, 64))
	}
	if s.QueueBytes > 0 {
		parts = append(parts, "queue="+strconv.Itoa(s.QueueBytes))
	}
	if s.Reorder {
		parts = append(parts, "reorder")
	}
	if len(parts) == 0 {
		return "lan"
	}
	return strings.Join(parts, "+")
}
