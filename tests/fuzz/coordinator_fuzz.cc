// libFuzzer target: arbitrary bytes as one Thrift call to the coordinator's
// handlers (binary protocol, what follows the frame length on the wire),
// against a service over an in-memory SQLite database that lives across
// inputs. Malformed input must end as a Thrift error or an error reply;
// the service must never crash, hang (blocking calls may not wait here) or
// corrupt memory.
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/base/logging.h"

namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TMemoryBuffer;

struct Harness {
  parallax::FakeClock clock;
  std::unique_ptr<parallax::coordinator::StateStore> store;
  std::shared_ptr<parallax::coordinator::CoordinatorService> service;
  std::shared_ptr<parallax::rpc::CoordinatorProcessor> processor;

  Harness() {
    parallax::SetMinLogLevel(parallax::LogLevel::kFatal);
    parallax::coordinator::SqliteStateStoreOptions options;
    options.path = ":memory:";
    auto opened = parallax::coordinator::OpenSqliteStateStore(options);
    if (!opened.ok()) std::abort();
    store = std::move(opened).value();
    parallax::coordinator::ServiceOptions service_options;
    service_options.max_wait_ms = 0;  // long polls and key waits return at once
    service = std::make_shared<parallax::coordinator::CoordinatorService>(store.get(), &clock,
                                                                          service_options);
    if (!service->Init().ok()) std::abort();
    processor = std::make_shared<parallax::rpc::CoordinatorProcessor>(service);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* harness = new Harness();
  auto in = std::make_shared<TMemoryBuffer>(const_cast<uint8_t*>(data), static_cast<uint32_t>(size),
                                            TMemoryBuffer::OBSERVE);
  auto out = std::make_shared<TMemoryBuffer>();
  auto in_protocol = std::make_shared<TBinaryProtocol>(in);
  in_protocol->setStringSizeLimit(1 << 20);
  in_protocol->setContainerSizeLimit(10'000);
  auto out_protocol = std::make_shared<TBinaryProtocol>(out);
  try {
    harness->processor->process(in_protocol, out_protocol, nullptr);
  } catch (const apache::thrift::TException&) {
    // Malformed input: the server drops such a connection.
  }
  harness->clock.Advance(100);
  return 0;
}
