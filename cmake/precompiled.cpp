// The translation unit that makes the shared precompiled header
// (cmake/IotestBuildSpeed.cmake); it holds no code.
