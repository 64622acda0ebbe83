#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims
internal import SystemPackage

enum System {
    /// Cores this process may use.
    static var activeProcessorCount: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
}
