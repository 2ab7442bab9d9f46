package runtime

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// isUnimplemented: the runtime does not offer the call (containerd 1.6 and
// GetContainerEvents).
func isUnimplemented(err error) bool { return grpcCode(err) == codes.Unimplemented }

func grpcCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return status.Code(err)
}
