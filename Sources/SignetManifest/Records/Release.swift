import SignetCore

/// One release, as `status`, `rollback` and the hooks name it.
public struct Release: Sendable, Equatable {
    public let name: String
    public let version: String
    public let sequence: UInt64

    package init(_ manifest: Manifest) {
        (name, version, sequence) = (manifest.name, manifest.version, manifest.sequence)
    }

    /// "app 1.2 (sequence 12)".
    public var description: String { "\(name) \(version) (sequence \(sequence))" }
}
