#pragma once
/// Errors the library throws. Expected outcomes (a trial that ran out of memory, a fit that found
/// no batch) are values, not exceptions; these are for input that cannot be used.
#include <stdexcept>
#include <string>

namespace batchwise {

/// Base of every error the library throws. what() is one line naming the input, what was wrong
/// and what to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An option or combination of options that cannot be honoured (min above max, a malformed size).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A dataset that is missing, corrupt or inconsistent.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A model that cannot be built or trained as asked (unknown name, wrong input shape).
class ModelError : public Error {
 public:
  using Error::Error;
};

/// A device that is absent or unusable (cuda asked for on a machine without one).
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace batchwise
