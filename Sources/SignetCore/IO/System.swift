#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage

package enum System {
    /// Cores this process may use.
    package static var activeProcessorCount: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
}
