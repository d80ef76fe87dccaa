// Every name of one of include/parallax/settings.h's enums, in declaration
// order (the i-th name is static_cast<E>(i)): what the job file loader lists
// in "expected one of ..." and offers as "did you mean". Specialised for
// Arch, Consistency, VariablePath, ValueEncoding, OptimizerType and
// Initializer::Type.
#ifndef PARALLAX_CORE_BASE_SETTING_NAMES_H_
#define PARALLAX_CORE_BASE_SETTING_NAMES_H_

#include <string_view>
#include <vector>

#include "parallax/settings.h"

namespace parallax {

template <typename E>
std::vector<std::string_view> SettingNames();

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_SETTING_NAMES_H_
