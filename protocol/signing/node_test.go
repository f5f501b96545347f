package signing

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// nodeClient is the Node.js signed-call client, which implements the mechanism with Node's
// own crypto (OpenSSL) and a hand-written protobuf encoder.
const nodeClient = "../../test/nodeclient/signed_call.mjs"

// TestVectorsInNode: a second, independent implementation — JavaScript, no Go and no
// protobuf library — reproduces every published vector: the key, the request's encoding, the
// pre-image, the signature and the metadata. A vector altered by one character fails it.
func TestVectorsInNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the cross-language check of the vectors did not run")
	}
	run := func(vectors string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(node, nodeClient, "--vector", vectors)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("testdata/vectors.json")
	require.NoError(t, err, out)
	require.Contains(t, out, "vectors reproduced")

	raw, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	for name, change := range map[string][2]string{
		"signature": {`"signature_b64url": "VFHg5mG3`, `"signature_b64url": "VFHg5mG4`},
		"body":      {`"body_hex": "0a076167656e742d61"`, `"body_hex": "0a076167656e742d62"`},
		"pre-image": {`\n1767225600000\nAAECAwQFBgcICQoLDA0ODw\n7418`, `\n1767225600001\nAAECAwQFBgcICQoLDA0ODw\n7418`},
		"JSON call": {`"signature_b64url": "IU0uAvYK`, `"signature_b64url": "IU0uAvYL`},
	} {
		require.Equal(t, 1, bytes.Count(raw, []byte(change[0])), name)
		bad := filepath.Join(t.TempDir(), "vectors.json")
		require.NoError(t, os.WriteFile(bad, bytes.Replace(raw, []byte(change[0]), []byte(change[1]), 1), 0o600))
		out, err := run(bad)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "a changed %s is caught: %s", name, out)
		require.Equal(t, 1, exit.ExitCode(), out)
		require.Contains(t, out, "MISMATCH")
	}
}
