import Foundation
import Synchronization
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A flag set once, read from any thread.
package final class CancellationFlag: Sendable {
    private let value = Mutex(false)
    package init() {}
    package func set() { value.withLock { $0 = true } }
    package var isSet: Bool { value.withLock { $0 } }
}
