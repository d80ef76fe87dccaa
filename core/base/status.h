// Status and StatusOr are public types of libparallax: include/parallax/status.h.
#ifndef PARALLAX_CORE_BASE_STATUS_H_
#define PARALLAX_CORE_BASE_STATUS_H_

#include "parallax/status.h"

#endif  // PARALLAX_CORE_BASE_STATUS_H_
