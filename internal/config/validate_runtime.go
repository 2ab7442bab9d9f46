package config

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nodelet/nodelet/internal/pullmanager"
)

// Validate checks the runtime section and returns its first problem as an
// *Error.
func (r *RuntimeConfig) Validate() error {
	return firstError(
		func() error { return endpoint("runtime.endpoint", r.Endpoint, false) },
		func() error { return endpoint("runtime.imageEndpoint", r.ImageEndpoint, true) },
		func() error {
			if r.SandboxImage == "" {
				return &Error{Key: "runtime.sandboxImage", Problem: "must name the pause image"}
			}
			return nil
		},
		func() error { return positiveDur("runtime.relistPeriod", r.RelistPeriod) },
		func() error { return positiveDur("runtime.runtimeRequestTimeout", r.RuntimeRequestTimeout) },
		func() error {
			return positiveDur("runtime.maxContainerRestartPeriod", r.MaxContainerRestartPeriod)
		},
		func() error { return positive("runtime.maxParallelImagePulls", r.MaxParallelImagePulls) },
		func() error {
			return nonNegative("runtime.maxConcurrentSandboxCreations", r.MaxConcurrentSandboxCreations)
		},
		func() error { return absPath("runtime.cniConfDir", r.CNIConfDir, false) },
		func() error {
			if r.ContainerdVersion != 1 && r.ContainerdVersion != 2 {
				return &Error{Key: "runtime.containerdVersion", Problem: fmt.Sprintf("%d must be 1 (Debian's containerd 1.6) or 2 (containerd 2.x)", r.ContainerdVersion)}
			}
			return nil
		},
		func() error { return absPath("runtime.containerdBinary", r.ContainerdBinary, true) },
		func() error {
			if len(r.CNIBinDirs) == 0 {
				return &Error{Key: "runtime.cniBinDirs", Problem: "must list at least one directory"}
			}
			for _, d := range r.CNIBinDirs {
				if err := absPath("runtime.cniBinDirs", d, false); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			if n := len(r.CNIBridgeName); n == 0 || n > 15 || strings.ContainsAny(r.CNIBridgeName, "/ \t") {
				return &Error{Key: "runtime.cniBridgeName", Problem: fmt.Sprintf("%q must be a Linux interface name of 1 to 15 characters", r.CNIBridgeName)}
			}
			if r.CNINetworkName == "" {
				return &Error{Key: "runtime.cniNetworkName", Problem: "must not be empty"}
			}
			return nil
		},
		func() error {
			if !strings.HasPrefix(r.CgroupRoot, "/") {
				return &Error{Key: "runtime.cgroupRoot", Problem: fmt.Sprintf("%q must start with /", r.CgroupRoot)}
			}
			if r.CgroupRoot == "/" || strings.Contains(r.CgroupRoot, "_") {
				return &Error{Key: "runtime.cgroupRoot", Problem: fmt.Sprintf("%q must name a cgroup below / without \"_\"", r.CgroupRoot)}
			}
			return nil
		},
		func() error {
			switch r.CgroupDriver {
			case "cgroupfs", "systemd":
				return nil
			}
			return &Error{Key: "runtime.cgroupDriver", Problem: fmt.Sprintf("%q must be cgroupfs or systemd", r.CgroupDriver)}
		},
		func() error {
			if r.PodPidsLimit == 0 || r.PodPidsLimit < -1 {
				return &Error{Key: "runtime.podPidsLimit", Problem: fmt.Sprintf("%d must be positive, or -1 for unlimited", r.PodPidsLimit)}
			}
			return nil
		},
		func() error { return enforceNodeAllocatable(r) },
		func() error {
			if r := r.SeccompProfileRoot; r != "" && !filepath.IsAbs(r) {
				return &Error{Key: "runtime.seccompProfileRoot", Problem: fmt.Sprintf("%q must be an absolute path", r)}
			}
			return nil
		},
		func() error {
			switch r.ConfigMapAndSecretChangeDetectionStrategy {
			case "Watch", "Cache", "Get":
				return nil
			}
			return &Error{Key: "runtime.configMapAndSecretChangeDetectionStrategy", Problem: fmt.Sprintf("%q must be Watch, Cache or Get", r.ConfigMapAndSecretChangeDetectionStrategy)}
		},
		func() error { return positiveDur("runtime.syncFrequency", r.SyncFrequency) },
		r.validateImageCredentials,
	)
}

// validateImageCredentials checks the credential-provider paths (the
// kubelet registers plugins when either is set and stops when one is
// missing) and the verification policy as the kubelet's
// ValidateKubeletConfiguration does.
func (r *RuntimeConfig) validateImageCredentials() error {
	if err := absPath("runtime.imageCredentialProviderConfig", r.ImageCredentialProviderConfig, true); err != nil {
		return err
	}
	if err := absPath("runtime.imageCredentialProviderBinDir", r.ImageCredentialProviderBinDir, true); err != nil {
		return err
	}
	switch {
	case r.ImageCredentialProviderConfig != "" && r.ImageCredentialProviderBinDir == "":
		return &Error{Key: "runtime.imageCredentialProviderBinDir", Problem: "must be set with runtime.imageCredentialProviderConfig"}
	case r.ImageCredentialProviderConfig == "" && r.ImageCredentialProviderBinDir != "":
		return &Error{Key: "runtime.imageCredentialProviderConfig", Problem: "must be set with runtime.imageCredentialProviderBinDir"}
	}
	switch r.ImagePullCredentialsVerificationPolicy {
	case "NeverVerify", "NeverVerifyPreloadedImages", "NeverVerifyAllowlistedImages", "AlwaysVerify":
	default:
		return &Error{Key: "runtime.imagePullCredentialsVerificationPolicy", Problem: fmt.Sprintf("%q: valid options are NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages or AlwaysVerify", r.ImagePullCredentialsVerificationPolicy)}
	}
	if len(r.PreloadedImagesVerificationAllowlist) > 0 && r.ImagePullCredentialsVerificationPolicy != "NeverVerifyAllowlistedImages" {
		return &Error{Key: "runtime.preloadedImagesVerificationAllowlist", Problem: "can't be set if runtime.imagePullCredentialsVerificationPolicy is not NeverVerifyAllowlistedImages"}
	}
	if err := pullmanager.ValidateAllowlist(r.PreloadedImagesVerificationAllowlist); err != nil {
		return &Error{Key: "runtime.preloadedImagesVerificationAllowlist", Problem: "invalid image pattern: " + err.Error()}
	}
	return nil
}
