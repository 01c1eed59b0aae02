package loggen

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// DefaultOracleDir is where the reference oracle is installed when ORACLE_DIR is not set.
const DefaultOracleDir = "/tmp/oracle"

// OracleDir returns $ORACLE_DIR, or DefaultOracleDir.
func OracleDir() string {
	if d := os.Getenv("ORACLE_DIR"); d != "" {
		return d
	}
	return DefaultOracleDir
}

// OracleAvailable reports why the oracle cannot run ("" when it can): node must be on PATH and
// oracleDir must hold oracle.mjs and the installed reference package.
func OracleAvailable(oracleDir string) string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on PATH"
	}
	if _, err := os.Stat(filepath.Join(oracleDir, "oracle.mjs")); err != nil {
		return fmt.Sprintf("no oracle.mjs in %s (set ORACLE_DIR; install with npm ci, see shared/conformance/README.md)", oracleDir)
	}
	if _, err := os.Stat(filepath.Join(oracleDir, "node_modules", "@deepseek-ai", "dsh-session")); err != nil {
		return fmt.Sprintf("the reference package is not installed in %s/node_modules (run npm ci there)", oracleDir)
	}
	return ""
}

// RunOracleDir runs `node ORACLE/oracle.mjs --all-forks --dir dir` once: the oracle writes
// X.expected.json beside every X.jsonl in dir.
func RunOracleDir(oracleDir, dir string) error {
	cmd := exec.Command("node", filepath.Join(oracleDir, "oracle.mjs"), "--all-forks", "--dir", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("oracle over %s: %v: %s", dir, err, stderr.String())
	}
	return nil
}

// RunOracle runs the oracle over one JSONL log (stdin mode, --all-forks) and returns its output.
func RunOracle(oracleDir string, jsonl []byte) ([]byte, error) {
	cmd := exec.Command("node", filepath.Join(oracleDir, "oracle.mjs"), "--all-forks")
	cmd.Stdin = bytes.NewReader(jsonl)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("oracle: %v: %s", err, stderr.String())
	}
	return stdout.Bytes(), nil
}
