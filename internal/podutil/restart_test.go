package podutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestContainerShouldRestart(t *testing.T) {
	always, never, onFailure := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever, corev1.ContainerRestartPolicyOnFailure
	rule := func(op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) []corev1.ContainerRestartRule {
		return []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}}
	}
	for _, tc := range []struct {
		name      string
		pod       corev1.RestartPolicy
		container *corev1.ContainerRestartPolicy
		rules     []corev1.ContainerRestartRule
		exit      int32
		want      bool
	}{
		{"pod Always, exit 0", corev1.RestartPolicyAlways, nil, nil, 0, true},
		{"pod OnFailure, exit 0", corev1.RestartPolicyOnFailure, nil, nil, 0, false},
		{"pod OnFailure, exit 1", corev1.RestartPolicyOnFailure, nil, nil, 1, true},
		{"pod Never, exit 1", corev1.RestartPolicyNever, nil, nil, 1, false},
		{"container Always beats pod Never", corev1.RestartPolicyNever, &always, nil, 0, true},
		{"container Never beats pod Always", corev1.RestartPolicyAlways, &never, nil, 1, false},
		{"container OnFailure, exit 2", corev1.RestartPolicyNever, &onFailure, nil, 2, true},
		{"rule In matches", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, true},
		{"rule In misses", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 1, false},
		{"rule NotIn matches", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0), 3, true},
		{"rules ignored without a container policy", corev1.RestartPolicyNever, nil, rule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, false},
	} {
		c := &corev1.Container{RestartPolicy: tc.container, RestartPolicyRules: tc.rules}
		if got := ContainerShouldRestart(c, &corev1.PodSpec{RestartPolicy: tc.pod}, tc.exit); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIsRestartableInit(t *testing.T) {
	always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever
	for _, tc := range []struct {
		name string
		c    *corev1.Container
		want bool
	}{
		{"nil container", nil, false},
		{"no policy", &corev1.Container{}, false},
		{"Never", &corev1.Container{RestartPolicy: &never}, false},
		{"Always", &corev1.Container{RestartPolicy: &always}, true},
	} {
		if got := IsRestartableInit(tc.c); got != tc.want {
			t.Errorf("%s: IsRestartableInit = %v, want %v", tc.name, got, tc.want)
		}
	}
}
