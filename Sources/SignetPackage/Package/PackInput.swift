#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetManifest

/// One resource to pack: where it is on disk and where it goes in the package.
public struct PackInput: Sendable, Equatable {
    /// The file on disk.
    public let diskPath: String
    /// The resource path in the package.
    public let packagePath: String
    /// Its size when the inputs were collected.
    public let size: UInt64
    /// Its mode in the manifest.
    public let mode: Manifest.FileMode
}
