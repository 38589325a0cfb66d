// feature_db.h: the route_guide example's map, built in code so the programs
// need no data file.
//
// The map is a 10 x 10 grid of features, one every 0.01 degree starting at
// (40.0000000, -74.0000000): the feature in row r (north) and column c (east),
// 0 <= r, c < 10, is at latitude 400000000 + r * kGridStepE7 and longitude
// -740000000 + c * kGridStepE7 (E7 degrees) and is named "Feature r-c"
// (e.g. "Feature 3-7"). Every point between grid points is empty.
#ifndef RDMARPC_EXAMPLES_ROUTE_GUIDE_FEATURE_DB_H_
#define RDMARPC_EXAMPLES_ROUTE_GUIDE_FEATURE_DB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "route_guide.pb.h"

namespace routeguide {

inline constexpr int kGridRows = 10;
inline constexpr int kGridColumns = 10;
inline constexpr int32_t kGridOriginLatitude = 400000000;
inline constexpr int32_t kGridOriginLongitude = -740000000;
// 0.01 degree, about 1.1 km north-south.
inline constexpr int32_t kGridStepE7 = 100000;

// The point of the feature in row `row`, column `column` (need not be inside
// the grid: points outside it are empty).
rdmarpc::examples::routeguide::Point GridPoint(int row, int column);

// All kGridRows * kGridColumns features, row by row.
std::vector<rdmarpc::examples::routeguide::Feature> BuiltInFeatures();

// Great-circle distance between two points in metres (haversine formula,
// Earth radius 6371 km, as gRPC's route_guide example computes it).
double DistanceMetres(const rdmarpc::examples::routeguide::Point& a,
                      const rdmarpc::examples::routeguide::Point& b);

// "(40.0300000, -73.9300000)": a point in degrees, for printing.
std::string FormatPoint(const rdmarpc::examples::routeguide::Point& point);

}  // namespace routeguide

#endif  // RDMARPC_EXAMPLES_ROUTE_GUIDE_FEATURE_DB_H_
