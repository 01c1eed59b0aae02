package natsdev

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// serverLogger forwards an embedded nats-server's log to a slog.Logger: errors and fatal errors at
// Error, warnings at Warn (what the server says about data it lost or discarded: a stream whose
// metafile or blocks are corrupt, a state it rebuilt, messages it could not recover), notices at
// Debug. Debug and trace lines are not asked for.
type serverLogger struct{ l *slog.Logger }

func (s serverLogger) log(level slog.Level, format string, v []any) {
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, "nats-server: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (s serverLogger) Noticef(format string, v ...any) { s.log(slog.LevelDebug, format, v) }
func (s serverLogger) Warnf(format string, v ...any)   { s.log(slog.LevelWarn, format, v) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.log(slog.LevelError, format, v) }
func (s serverLogger) Errorf(format string, v ...any)  { s.log(slog.LevelError, format, v) }
func (s serverLogger) Debugf(format string, v ...any)  { s.log(slog.LevelDebug-4, format, v) }
func (s serverLogger) Tracef(format string, v ...any)  { s.log(slog.LevelDebug-8, format, v) }
