package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// Durations in JSON lines read as in text ones ("2.992s"), not as a bare
// count of nanoseconds under a key that names no unit.
func TestLogJSONDurations(t *testing.T) {
	var out bytes.Buffer
	h, err := newHandler(&out, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	slog.New(h).Info("waiting for the lock", "expires_in", 2992*time.Millisecond, slog.Group("g", "retry_in", time.Second))
	var rec struct {
		ExpiresIn any            `json:"expires_in"`
		G         map[string]any `json:"g"`
	}
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("%s: %v", out.Bytes(), err)
	}
	if rec.ExpiresIn != "2.992s" || rec.G["retry_in"] != "1s" {
		t.Errorf("line %s: want expires_in \"2.992s\" and g.retry_in \"1s\"", out.Bytes())
	}
}
