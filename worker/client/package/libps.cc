// libps: the C++ client (worker/client) as one shared library. Its code is
// all in ps_client and the libraries it links; this file only gives the
// library a source of its own.
namespace ps {
const char* const kLibraryName = "libps";
}  // namespace ps
