package lab

import "testing"

func TestCaptureShortfall(t *testing.T) {
	complete := "tcpdump: listening on any\n4161 packets captured\n4161 packets received by filter\n0 packets dropped by kernel\n"
	if n := captureShortfall(complete); n != "" {
		t.Errorf("complete capture flagged: %s", n)
	}
	short := "4092 packets captured\n4163 packets received by filter\n0 packets dropped by kernel\n"
	if n := captureShortfall(short); n == "" {
		t.Error("71 packets short not flagged")
	}
	dropped := "10 packets captured\n10 packets received by filter\n3 packets dropped by kernel\n"
	if n := captureShortfall(dropped); n == "" {
		t.Error("kernel drops not flagged")
	}
}

func FuzzCaptureShortfall(f *testing.F) {
	f.Add("4092 packets captured\n4163 packets received by filter\n0 packets dropped by kernel\n")
	f.Add("garbage\n-1 packets captured\n")
	f.Fuzz(func(t *testing.T, log string) {
		_ = captureShortfall(log) // must not panic on any tcpdump output
	})
}
