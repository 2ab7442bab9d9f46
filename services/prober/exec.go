package prober

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/internal/podutil"
)

// maxExecOutput bounds the output of an exec probe that is kept.
const maxExecOutput = 10 * 1 << 10 // 10KB

// execProber runs exec probes through CRI ExecSync with the probe's
// timeout, like the kubelet's pkg/probe/exec over RunInContainer: exit 0 is
// success, any other exit code a failure with the command's output (stdout
// then stderr), a timeout a failure saying so, anything else (the runtime
// did not answer, the container is gone) an error.
type execProber struct {
	runtime internalapi.RuntimeService
}

func (p execProber) probe(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (outcome, string, error) {
	if p.runtime == nil {
		return outcomeUnknown, "", errors.New("no container runtime to run exec probes in")
	}
	stdout, stderr, err := p.runtime.ExecSync(ctx, containerID, cmd, timeout)
	data := append(stdout, stderr...)
	if len(data) > maxExecOutput {
		data = data[:maxExecOutput]
	}
	if err != nil {
		var exit utilexec.ExitError
		if errors.As(err, &exit) {
			if exit.ExitStatus() == 0 {
				return outcomeSuccess, string(data), nil
			}
			return outcomeFailure, string(data), nil
		}
		if errors.Is(err, remote.ErrCommandTimedOut) {
			return outcomeFailure, err.Error(), nil
		}
		return outcomeUnknown, "", fmt.Errorf("exec in container %s: %w", containerID, err)
	}
	return outcomeSuccess, string(data), nil
}

// expandCommand expands $(VAR) references in an exec probe's command with
// the container's static env values only (the kubelet's
// ExpandContainerCommandOnlyStatic: an exec probe does not see the pod's
// environment or the downward API). $$ escapes a $, an unknown reference
// stays as written.
func expandCommand(cmd []string, env []corev1.EnvVar) []string {
	if len(cmd) == 0 {
		return nil
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out := make([]string, 0, len(cmd))
	for _, c := range cmd {
		out = append(out, expand(c, vars))
	}
	return out
}

// expand is the kubelet's expansion.Expand with MappingFuncFor(vars).
func expand(input string, vars map[string]string) string {
	return podutil.Expand(input, podutil.MappingFor(vars))
}
