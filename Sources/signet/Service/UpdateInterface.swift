/// The varlink interfaces `signet serve` implements, as `GetInterfaceDescription` returns them
/// (docs/varlink/ holds the same text; a test keeps them equal).
enum UpdateInterface {
    static let name = "io.signet.Update"

    static let description = """
        # Signet's update service for one installed directory: what `signet update --config FILE`
        # does, for a UI or a device agent (FORMAT.md §9). Status is open to every client that may
        # open the socket; every other method needs the socket's owner (or root).
        interface io.signet.Update

        # A release of a package.
        type Release (name: string, version: string, sequence: int)

        # The release a channel names, with the SHA-256 of its signed manifest: what Install's
        # requireManifestSha256 binds an install to.
        type Offered (name: string, version: string, sequence: int, manifestSha256: string)

        # A release refused as bad, and why.
        type Bad (name: string, sequence: int, reason: string, at: string)

        # What the last update found on the channel and did not install, and why (a hold, a
        # version lock, a rollout that has not reached this device, a maintenance window).
        type HeldBack (sequence: int, version: string, note: string, at: string)

        # The command the service is running: its method, since when, its step and last event.
        type Job (method: string, since: string, phase: ?string, lastEvent: ?object)

        # Refreshes the trusted metadata and says what the channel offers (`signet update
        # --check --json`, whole, in report).
        method Check() -> (updateAvailable: bool, installed: ?Release, available: Offered, report: object)

        # Installs the channel's release as `signet update` does. With requireManifestSha256,
        # only the release whose signed manifest has that SHA-256 (from Check): another, even
        # one correctly signed, fails with code not-confirmed. Called with more, each event of
        # `signet update --events-fd` is a reply of its own (event set) before the last (result
        # set: the `--json` document). The install runs to its end if the client goes away.
        method Install(requireManifestSha256: ?string) -> (event: ?object, result: ?object)

        # The releases of the directory (`signet status DIR --json`, whole, in report) and the
        # command running now, if any. Never waits for a running command.
        method Status() -> (
          destination: string,
          current: ?Release,
          previous: ?Release,
          pending: bool,
          bad: []Bad,
          heldBack: ?HeldBack,
          running: ?Job,
          report: object
        )

        # Marks the pending release good (`signet confirm DIR`).
        method Confirm() -> (confirmed: ?Release)

        # Swaps the previous release back (`signet rollback --config FILE`).
        method Rollback() -> (rolledBack: bool, from: ?Release, to: ?Release, skipped: ?string)

        # Stops the running command (SIGTERM): it removes what it staged and the directory stays
        # as it was; the method it served fails with Cancelled. Returns once it has ended.
        method Cancel() -> (cancelled: bool, method: ?string)

        # Another command is running (one at a time): its method and since when.
        error Busy (method: string, since: string)

        # The command failed: Signet's error code and exit status (FORMAT.md §4), its message,
        # and the file or package entry concerned.
        error Failed (code: string, exit: int, message: string, file: ?string, entry: ?string)

        # Cancel stopped the command before it finished.
        error Cancelled ()
        """

    /// The service interface every varlink service provides (https://varlink.org/Service),
    /// with the errors of its current text.
    static let serviceDescription = """
        # The Varlink Service Interface is provided by every varlink service. It
        # describes the service and the interfaces it implements.
        interface org.varlink.service

        # Get a list of all the interfaces a service provides and information
        # about the implementation.
        method GetInfo() -> (
          vendor: string,
          product: string,
          version: string,
          url: string,
          interfaces: []string
        )

        # Get the description of an interface that is implemented by this service.
        method GetInterfaceDescription(interface: string) -> (description: string)

        # The requested interface was not found.
        error InterfaceNotFound (interface: string)

        # The requested method was not found
        error MethodNotFound (method: string)

        # The interface defines the requested method, but the service does not
        # implement it.
        error MethodNotImplemented (method: string)

        # One of the passed parameters is invalid.
        error InvalidParameter (parameter: string)

        # Client is denied access
        error PermissionDenied ()

        # Method is expected to be called with 'more' set to true, but wasn't
        error ExpectedMore ()
        """
}
