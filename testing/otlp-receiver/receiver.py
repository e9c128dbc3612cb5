"""An OTLP/gRPC trace receiver for tests: the official TraceService/Export
from opentelemetry-proto's generated code. Prints `listening on PORT`, then
one JSON line per span received: its name, service.name and attributes."""
import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value_of(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in ("string_value", "bool_value", "int_value", "double_value") else str(v)


# Exports arrive on several threads; one write per line under a lock keeps
# their lines whole.
_out = threading.Lock()


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "name": span.name,
                        "service": resource.get("service.name"),
                        "trace_id": span.trace_id.hex(),
                        "attributes": {a.key: value_of(a.value) for a in span.attributes},
                    }
                    with _out:
                        sys.stdout.write(json.dumps(line) + "\n")
                        sys.stdout.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on {port}", flush=True)
    # Ends when the test closes stdin (or kills it).
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
