#include "tools/bench/json_line.h"

#include <cmath>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace runreaper::tools {

namespace {
constexpr char kUrlPrefix[] = "type.googleapis.com";
}  // namespace

JsonLine& JsonLine::Number(absl::string_view key, double value, int decimals) {
  google::protobuf::Value& v = (*fields_.mutable_fields())[std::string(key)];
  if (!std::isfinite(value)) {
    v.set_null_value(google::protobuf::NULL_VALUE);
    return *this;
  }
  const double scale = std::pow(10.0, decimals);
  v.set_number_value(std::round(value * scale) / scale);
  return *this;
}

JsonLine& JsonLine::Int(absl::string_view key, long value) {
  (*fields_.mutable_fields())[std::string(key)].set_number_value(static_cast<double>(value));
  return *this;
}

JsonLine& JsonLine::Bool(absl::string_view key, bool value) {
  (*fields_.mutable_fields())[std::string(key)].set_bool_value(value);
  return *this;
}

JsonLine& JsonLine::Merge(const JsonLine& other, absl::string_view collision_prefix) {
  auto* mine = fields_.mutable_fields();
  for (const auto& [key, value] : other.fields_.fields()) {
    const std::string name = mine->count(key) == 0 ? key : absl::StrCat(collision_prefix, key);
    (*mine)[name] = value;
  }
  return *this;
}

absl::StatusOr<JsonLine> JsonLine::Parse(absl::string_view json) {
  JsonLine out;
  const auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &out.fields_);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", status.ToString()));
  }
  return out;
}

absl::StatusOr<std::string> JsonLine::ToString() const {
  // MessageToJsonString serialises the map in hash order; a deterministic
  // serialisation sorts map keys, so print from that.
  std::string binary;
  {
    google::protobuf::io::StringOutputStream raw(&binary);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    fields_.SerializeToCodedStream(&coded);
  }
  std::unique_ptr<google::protobuf::util::TypeResolver> resolver(
      google::protobuf::util::NewTypeResolverForDescriptorPool(
          kUrlPrefix, google::protobuf::DescriptorPool::generated_pool()));
  std::string json;
  const auto status = google::protobuf::util::BinaryToJsonString(
      resolver.get(),
      std::string(kUrlPrefix) + "/" + google::protobuf::Struct::descriptor()->full_name(), binary,
      &json);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("printing JSON: ", status.ToString()));
  }
  return json;
}

}  // namespace runreaper::tools
