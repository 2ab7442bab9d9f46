package runtime

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// isNotFound: the runtime no longer has the object (removed meanwhile).
func isNotFound(err error) bool { return grpcCode(err) == codes.NotFound }

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
