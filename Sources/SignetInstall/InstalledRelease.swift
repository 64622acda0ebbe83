import Foundation

/// A release installed in a destination: its manifest's name, version and sequence.
public struct InstalledRelease: Sendable, Equatable {
    public let name: String
    public let version: String
    public let sequence: UInt64

    /// What `destination` holds now (nil: no installed package). A directory Signet did not
    /// install is refused unless `force`.
    package static func inspect(_ destination: String, force: Bool) throws -> InstalledRelease? {
        guard case .installed(let manifest?) = try DestinationState.inspect(destination, force: force) else { return nil }
        return InstalledRelease(name: manifest.name, version: manifest.version, sequence: manifest.sequence)
    }
}
