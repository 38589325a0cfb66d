#include "feature_db.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace routeguide {

namespace rg = rdmarpc::examples::routeguide;

rg::Point GridPoint(int row, int column) {
  rg::Point point;
  point.set_latitude(kGridOriginLatitude + row * kGridStepE7);
  point.set_longitude(kGridOriginLongitude + column * kGridStepE7);
  return point;
}

std::vector<rg::Feature> BuiltInFeatures() {
  std::vector<rg::Feature> features;
  features.reserve(kGridRows * kGridColumns);
  for (int row = 0; row < kGridRows; ++row) {
    for (int column = 0; column < kGridColumns; ++column) {
      rg::Feature& feature = features.emplace_back();
      feature.set_name(absl::StrCat("Feature ", row, "-", column));
      *feature.mutable_location() = GridPoint(row, column);
    }
  }
  return features;
}

double DistanceMetres(const rg::Point& a, const rg::Point& b) {
  constexpr double kE7 = 1e7;
  constexpr double kEarthRadiusMetres = 6371000;
  constexpr double kRadiansPerDegree = M_PI / 180;
  const double lat1 = a.latitude() / kE7 * kRadiansPerDegree;
  const double lat2 = b.latitude() / kE7 * kRadiansPerDegree;
  const double dlat = lat2 - lat1;
  const double dlon = (b.longitude() - a.longitude()) / kE7 * kRadiansPerDegree;
  const double h = std::sin(dlat / 2) * std::sin(dlat / 2) +
                   std::cos(lat1) * std::cos(lat2) * std::sin(dlon / 2) * std::sin(dlon / 2);
  return kEarthRadiusMetres * 2 * std::atan2(std::sqrt(h), std::sqrt(1 - h));
}

std::string FormatPoint(const rg::Point& point) {
  // Integer arithmetic, so the printed digits are exact.
  auto degrees = [](int32_t e7) {
    const int64_t v = e7;
    return absl::StrFormat("%s%d.%07d", v < 0 ? "-" : "", std::llabs(v) / 10000000,
                           std::llabs(v) % 10000000);
  };
  return absl::StrCat("(", degrees(point.latitude()), ", ", degrees(point.longitude()), ")");
}

}  // namespace routeguide
